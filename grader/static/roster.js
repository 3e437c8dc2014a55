// Follows the roster import (follow.js): its state and the students imported so far, until it
// is final and the page reloads to show the result and the passwords' download.
(function () {
  var box = document.getElementById("roster-job");
  if (!box || box.dataset.final === "true") return;
  var state = document.getElementById("roster-job-state");
  var progress = document.getElementById("roster-progress");
  window.kgFollow(box.dataset.statusUrl, 1000, function (s) {
    state.textContent = s.label;
    state.className = "state state-" + s.state;
    progress.textContent = s.lines_total ? s.lines_done + " of " + s.lines_total + " students imported" : "";
  }, box);
})();
