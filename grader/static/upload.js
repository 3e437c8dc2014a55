// The upload form's drop zone: a .zip dropped on it (or chosen with the picker) is checked
// here for its name and size before anything is sent; the server checks both again, and the
// zip's own header. Sending shows its progress (the bytes sent, then the server's check),
// and a refusal is shown on this same form with the file and the assignment still chosen, so
// the student can send it again at once. No framework.
(function () {
  var zone = document.querySelector(".dropzone");
  if (!zone) return;
  var input = zone.querySelector("input[type=file]");
  var form = input.form;
  var error = document.getElementById("file-error");
  var chosen = document.getElementById("file-chosen");
  var refused = document.getElementById("upload-error");
  var progress = document.getElementById("upload-progress");
  var maxBytes = Number(zone.dataset.maxBytes);

  function problem(file) {
    if (!/\.zip$/i.test(file.name)) {
      return "“" + file.name + "” is not a .zip file. Zip your assignment folder " +
        "(for example with `zip -r folder.zip folder`) and upload the .zip.";
    }
    if (file.size > maxBytes) {
      return "“" + file.name + "” is " + (file.size / 1048576).toFixed(1) + " MiB; the limit is " +
        zone.dataset.maxMib + " MiB.";
    }
    return "";
  }
  function show(files) {
    var file = files && files[0];
    var why = file ? problem(file) : "";
    error.textContent = why;
    error.hidden = !why;
    chosen.textContent = file && !why ? "Ready to upload: " + file.name + " (" + Math.ceil(file.size / 1024) + " KiB)" : "";
    input.setAttribute("aria-invalid", why ? "true" : "false");
    if (why) input.value = "";
    return !why;
  }
  input.addEventListener("change", function () { show(input.files); });
  ["dragenter", "dragover"].forEach(function (name) {
    zone.addEventListener(name, function (e) { e.preventDefault(); zone.classList.add("over"); });
  });
  zone.addEventListener("dragleave", function () { zone.classList.remove("over"); });
  zone.addEventListener("drop", function (e) {
    e.preventDefault();
    zone.classList.remove("over");
    var files = e.dataTransfer && e.dataTransfer.files;
    if (!files || !files.length) return;
    if (show(files)) input.files = files;
  });

  var bar = progress.querySelector("progress");
  var said = progress.querySelector(".sent");
  var button = form.querySelector("button[type=submit]");
  function mib(bytes) { return (bytes / 1048576).toFixed(1); }
  function sending(on) {
    button.disabled = on;
    progress.hidden = !on;
  }
  function refuse(message) {
    sending(false);
    refused.textContent = message;
    refused.hidden = false;
    refused.scrollIntoView({ block: "center" });
  }
  function answered(xhr) {
    var sentTo = new URL(form.action, location.href).pathname;
    if (xhr.responseURL && new URL(xhr.responseURL).pathname !== sentTo) {
      location.assign(xhr.responseURL); // stored: its run page (or the login page, the session having ended)
      return;
    }
    var page = new DOMParser().parseFromString(xhr.responseText, "text/html");
    var why = page.getElementById("upload-error");
    if (xhr.status >= 400 && why) {
      refuse(why.textContent.trim());
      return;
    }
    document.open(); // any other answer (the earlier upload it repeats, a failure of ours) is the page
    document.write(xhr.responseText);
    document.close();
  }
  form.addEventListener("submit", function (e) {
    if (input.files.length && !show(input.files)) { e.preventDefault(); return; }
    e.preventDefault();
    var xhr = new XMLHttpRequest();
    xhr.open("POST", form.action);
    xhr.upload.addEventListener("progress", function (ev) {
      if (!ev.lengthComputable) return;
      var share = Math.floor(100 * ev.loaded / ev.total);
      bar.value = share;
      said.textContent = "Sent " + share + "% (" + mib(ev.loaded) + " of " + mib(ev.total) + " MiB)";
    });
    xhr.upload.addEventListener("load", function () {
      bar.value = 100;
      said.textContent = "Sent; the server is checking and storing it…";
    });
    xhr.addEventListener("load", function () { answered(xhr); });
    xhr.addEventListener("error", function () {
      refuse("The connection failed before the server answered. Look at My submissions before sending it again: " +
             "it may have been stored.");
    });
    refused.hidden = true;
    bar.value = 0;
    said.textContent = "Sending…";
    sending(true);
    xhr.send(new FormData(form));
  });
})();
