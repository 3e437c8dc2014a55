// Follows a run: polls its status every 2 s and reloads once when it is final,
// so the server renders the breakdown and logs. No framework.
(function () {
  var box = document.getElementById("run-status");
  if (!box || box.dataset.final === "true") return;
  var state = document.getElementById("run-state");
  var queue = document.getElementById("run-queue");
  var message = document.getElementById("run-message");
  function poll() {
    fetch(box.dataset.statusUrl, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(function (s) {
        if (s.final) { window.location.reload(); return; }
        state.textContent = s.state;
        state.className = "state state-" + s.state;
        queue.textContent = s.queue_position ? "(position " + s.queue_position + " in the queue)" : "";
        message.textContent = s.message || "";
        setTimeout(poll, 2000);
      })
      .catch(function () { setTimeout(poll, 2000); });
  }
  setTimeout(poll, 2000);
})();
