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
})();
