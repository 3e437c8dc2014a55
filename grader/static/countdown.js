// The upload page's "Time left": counts down each second from the seconds the server sent
// (data-seconds-left: the server's clock is the truth, only the time elapsed since the page
// loaded is measured here), in the server's words ("1 d 3 h 4 min 5 s until the due time").
// At zero it says so and asks for a reload, which shows what applies then. No framework.
(function () {
  var shown = [].slice.call(document.querySelectorAll(".time-left[data-seconds-left]"));
  if (!shown.length) return;
  var loaded = performance.now();
  var units = [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]];

  function words(seconds) {
    var parts = [];
    units.forEach(function (unit) {
      var count = Math.floor(seconds / unit[1]);
      seconds -= count * unit[1];
      if (count) parts.push(count + " " + unit[0]);
    });
    return parts.join(" ") || "0 s";
  }
  function tick() {
    var elapsed = Math.floor((performance.now() - loaded) / 1000);
    var running = false;
    shown.forEach(function (el) {
      var left = Math.max(0, Number(el.dataset.secondsLeft) - elapsed);
      el.querySelector(".left").textContent = words(left) + " " + el.dataset.what +
        (left > 0 ? "" : " (reload the page to see what applies now)");
      running = running || left > 0;
    });
    if (running) setTimeout(tick, 1000 - ((performance.now() - loaded) % 1000));
  }
  tick();
})();
