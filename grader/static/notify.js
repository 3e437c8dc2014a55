// The run page's opt-in notice: with "Notify me when grading ends" ticked (remembered in
// localStorage), the browser's Notification API tells the student when the followed run ends,
// with its result. follow.js fires "kg-final" on the status box just before it reloads the page;
// a mark in sessionStorage lets the reloaded page, its result rendered, show the notice (a
// page's notification may close as the page unloads). Where the API is missing, storage is
// blocked or the permission is refused, the page works as before. No framework.
(function () {
  var box = document.getElementById("run-status");
  if (!box || !("Notification" in window)) return;
  var CHOICE = "kg-notify";  // localStorage: "on" while the student wants notices
  var PENDING = "kg-notify-pending:" + box.dataset.statusUrl;  // sessionStorage: this tab followed the run to its end

  function get(storage, key) {
    try { return window[storage].getItem(key); } catch (e) { return null; }
  }
  function put(storage, key, value) {  // value null: remove
    try {
      if (value === null) window[storage].removeItem(key); else window[storage].setItem(key, value);
    } catch (e) { /* storage blocked: nothing is remembered */ }
  }
  function wanted() { return get("localStorage", CHOICE) === "on" && Notification.permission === "granted"; }
  function text(selector) {
    var el = document.querySelector(selector);
    return el ? el.textContent.replace(/\s+/g, " ").trim() : "";
  }

  if (box.dataset.final === "true") {
    if (get("sessionStorage", PENDING) !== "1") return;
    put("sessionStorage", PENDING, null);
    if (!wanted()) return;
    try {
      var notice = new Notification(text("h1") + ": " + text("#run-state"), {
        body: text("#run-status .score") || text("#run-message") || "Grading has ended.",
        tag: PENDING,
      });
      notice.onclick = function () { window.focus(); notice.close(); };
    } catch (e) { /* a browser that notifies only from a service worker: no notice */ }
    return;
  }

  var optin = document.getElementById("notify-optin");
  var tick = document.getElementById("notify-me");
  var note = document.getElementById("notify-note");
  if (!optin || !tick || !note) return;
  function refused() {
    var denied = Notification.permission === "denied";
    tick.checked = false;
    tick.disabled = denied;
    note.textContent = denied ? " Notifications are blocked for this site in your browser's settings."
                              : " Notifications were not allowed.";
  }
  function decided(permission) {
    if (permission === "granted") put("localStorage", CHOICE, "on"); else refused();
  }
  optin.hidden = false;
  tick.checked = wanted();
  if (Notification.permission === "denied") refused();
  tick.addEventListener("change", function () {
    note.textContent = "";
    if (!tick.checked) { put("localStorage", CHOICE, null); return; }
    if (Notification.permission === "granted") { decided("granted"); return; }
    // Older browsers answer through the callback, newer ones through the promise (and may call both)
    var asked = Notification.requestPermission(decided);
    if (asked && asked.then) asked.then(decided);
  });
  box.addEventListener("kg-final", function () {
    if (wanted()) put("sessionStorage", PENDING, "1");
  });
})();
