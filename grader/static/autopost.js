// Sends the page's one form as soon as it loads (an LTI message to the LMS); its button stays for
// a browser that runs no script.
document.addEventListener("DOMContentLoaded", () => document.getElementById("autopost").submit());
