// Sends the page's form marked data-autosubmit as soon as it loads (an LTI message to the LMS, a
// SAML answer posted again from our own origin); its button stays for a browser that runs no script.
document.addEventListener("DOMContentLoaded", () => document.querySelector("form[data-autosubmit]").submit());
