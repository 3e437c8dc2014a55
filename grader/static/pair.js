// The similarity pair view: each side's box opens scrolled to its first shared (highlighted)
// line, a few lines of context above it, instead of at line 1. No framework.
(function () {
  [].forEach.call(document.querySelectorAll(".sbs pre[data-side]"), function (pre) {
    var hit = pre.querySelector(".hit");
    if (!hit) return;
    var above = 3 * parseFloat(getComputedStyle(pre).lineHeight || "16");
    pre.scrollTop += hit.getBoundingClientRect().top - pre.getBoundingClientRect().top - (above || 48);
  });
})();
