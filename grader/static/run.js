// Follows a run (follow.js): polls its status every 2 s, shows the queue position and ETA, the stage or
// the problem being graded, the correctness verdicts known while speed is measured, and reloads once when the run is final so the server renders
// the breakdown and logs. No framework.
(function () {
  var box = document.getElementById("run-status");
  if (!box) return;
  var state = document.getElementById("run-state");
  var progress = document.getElementById("run-progress");
  var message = document.getElementById("run-message");
  var checked = document.getElementById("run-checked");
  var order = ["queued", "building", "running", "checked", "timing", "scored"];
  // The last step a final run completed: a built run stopped after building, a failed one
  // is only known to have left the queue.
  var finalStep = { scored: 5, built: 1, failed: 0 };
  function mark(current, isFinal) {
    var reached = isFinal ? finalStep[current] : order.indexOf(current);
    var steps = box.querySelectorAll("[data-step]");
    for (var i = 0; i < steps.length; i++) {
      var at = order.indexOf(steps[i].dataset.step);
      var now = !isFinal && at === reached;
      steps[i].className = (isFinal ? at <= reached : at < reached) ? "done" : (now ? "now" : "");
      if (now) steps[i].setAttribute("aria-current", "step"); else steps[i].removeAttribute("aria-current");
    }
  }
  mark(state.textContent.trim(), box.dataset.final === "true");
  if (box.dataset.final === "true") return;
  window.kgFollow(box.dataset.statusUrl, 2000, function (s) {
    state.textContent = s.state;
    state.className = "state state-" + s.state;
    progress.textContent = s.progress_text || "";
    var lines = s.checked || [];
    checked.replaceChildren.apply(checked, lines.map(function (line) {
      var item = document.createElement("li");
      item.textContent = line;
      return item;
    }));
    checked.hidden = lines.length === 0;
    message.textContent = s.message || "";
    mark(s.state, false);
  }, box);
})();
