// Follows the similarity job (follow.js): its state and the files fingerprinted so far, until
// it is final and the page reloads to show the report (or the failure).
(function () {
  var box = document.getElementById("job");
  if (!box || box.dataset.final === "true") return;
  var state = document.getElementById("job-state");
  var progress = document.getElementById("job-progress");
  var base = document.getElementById("job-base");
  window.kgFollow(box.dataset.statusUrl, 1500, function (s) {
    state.textContent = s.state;
    state.className = "state state-" + s.state;
    progress.textContent = s.files_total ? s.files_done + " of " + s.files_total + " files fingerprinted" : "";
    base.textContent = s.base ? "Base: " + s.base + "." : "";
  }, box);
})();
