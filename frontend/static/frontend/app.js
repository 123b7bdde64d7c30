// Dashboard glue: how HTMX treats error statuses, and a "select whole host" helper.
// Everything works without this file; it only makes the live parts smoother.
(function () {
  "use strict";
  if (window.htmx) {
    // Validation errors (422) and stale previews (409) carry a re-rendered fragment to show;
    // other errors leave the page as it is.
    htmx.config.responseHandling = [
      { code: "204", swap: false },
      { code: "[23]..", swap: true },
      { code: "409|422", swap: true, error: false },
      { code: "[45]..", swap: false, error: true },
    ];
    // Polled fragments must not steal focus or scroll position from the reader.
    htmx.config.defaultFocusScroll = false;
  }
  // Picking a whole host on the capacity page ticks (and locks) its GPU boxes, so the picked
  // set is visible; the server treats the host box as authoritative either way.
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box.matches || !box.matches("input[data-host-toggle]")) return;
    document.querySelectorAll('input[data-host="' + box.value + '"]').forEach(function (gpu) {
      gpu.checked = box.checked;
      gpu.disabled = box.checked;
    });
  });
  // List filters are GET forms: leave empty filters and the default sort out of the URL, so a
  // shared link reads "?pool=training&page=2", not every field of the form. Runs in the capture
  // phase, before the browser (or HTMX) reads the form; the fields come back right after.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.matches || !form.matches("form.filters")) return;
    var off = [];
    form.querySelectorAll("input[name], select[name]").forEach(function (field) {
      if (!field.disabled && (field.value === "" || field.value === field.getAttribute("data-default"))) {
        field.disabled = true;
        off.push(field);
      }
    });
    setTimeout(function () { off.forEach(function (field) { field.disabled = false; }); }, 0);
  }, true);
})();
