// Follows a JSON status (a run's, a similarity job's): fetches `url` every `everyMs`, hands
// each status to `show`, and reloads the page once the status is final, so the server renders
// the result; just before, `box` gets a "kg-final" event with that status (notify.js listens).
// Retries after a failed fetch. When the session has ended (401), it stops and
// says so in `box`: polling on would show a stale status forever. Its login link comes back
// to this page (the login page's `next`). No framework.
window.kgFollow = function (url, everyMs, show, box) {
  function signedOut() {
    var note = document.createElement("p");
    note.id = "signed-out";
    note.className = "error";
    note.setAttribute("role", "alert");
    note.appendChild(document.createTextNode(
      "Your session has ended, so this page stopped following. The work goes on: "));
    var link = document.createElement("a");
    link.href = "/login?next=" + encodeURIComponent(location.pathname + location.search);
    link.textContent = "log in again";
    note.appendChild(link);
    note.appendChild(document.createTextNode(" to come back here and see where it is."));
    box.appendChild(note);
  }
  function poll() {
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) return null;
        if (!r.ok) throw new Error(r.status);
        return r.json();
      })
      .then(function (s) {
        if (s === null) { signedOut(); return; }
        if (s.final) {
          box.dispatchEvent(new CustomEvent("kg-final", { detail: s }));
          window.location.reload();
          return;
        }
        show(s);
        setTimeout(poll, everyMs);
      })
      .catch(function () { setTimeout(poll, everyMs); });
  }
  setTimeout(poll, everyMs);
};
