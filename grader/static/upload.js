// The upload form's drop zone: a .zip dropped on it (or chosen with the picker) is checked
// here for its name and size before anything is sent; the server checks both again, and the
// zip's own header. No framework.
(function () {
  var zone = document.querySelector(".dropzone");
  if (!zone) return;
  var input = zone.querySelector("input[type=file]");
  var error = document.getElementById("file-error");
  var chosen = document.getElementById("file-chosen");
  var maxBytes = Number(zone.dataset.maxBytes);

  function problem(file) {
    if (!/\.zip$/i.test(file.name)) {
      return "“" + file.name + "” is not a .zip file. Zip your assignment folder " +
        "(for example with `zip -r llmsys_hw4.zip llmsys_hw4`) and upload the .zip.";
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
  input.form.addEventListener("submit", function (e) {
    if (input.files.length && !show(input.files)) e.preventDefault();
  });
})();
