// Follows a JSON status (a run's, a similarity job's): fetches `url` every `everyMs`, hands
// each status to `show`, and reloads the page once the status is final, so the server renders
// the result. Retries after a failed fetch. No framework.
window.kgFollow = function (url, everyMs, show) {
  function poll() {
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(function (s) {
        if (s.final) { window.location.reload(); return; }
        show(s);
        setTimeout(poll, everyMs);
      })
      .catch(function () { setTimeout(poll, everyMs); });
  }
  setTimeout(poll, everyMs);
};
