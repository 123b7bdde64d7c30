// Honest liveness and local times, on every page.
//
// Liveness: a live page carries `[data-live-status]` (partials/live_status.html) saying when it
// last updated. Each successful poll (an HTMX GET, or a `gpupool:updated` event from the chart
// pages' own refresh) moves that time on; a failed one (server down, network gone, an error
// status, a timeout: HTMX's error events, or `gpupool:update-failed`) turns the note — and the
// page's live parts — visibly stale: "stale — last update 14:02:11, updates failing". A watchdog
// also calls a page stale when no update arrived for three periods, so a hung request cannot look
// live either.
//
// Times: `<time datetime=ISO data-local>` is written by the server in UTC; here it is rewritten
// in the viewer's time zone, with the UTC time kept in its title (hover).
(function () {
  "use strict";
  var last = Date.now();
  var failing = "";

  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function clock(d) { return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()); }
  function day(d) { return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()); }
  function utc(d) { return d.toISOString().slice(0, 19).replace("T", " ") + " UTC"; }
  function zone() {
    try { return Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { return ""; }
  }

  function localise(root) {
    (root || document).querySelectorAll("time[data-local]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) return;
      var mode = el.dataset.local;
      if (mode === "title") {  // a relative time ("5 min ago"): the moment itself on hover
        el.title = day(d) + " " + clock(d) + (zone() ? " " + zone() : "") + " · " + utc(d);
        return;
      }
      el.textContent = mode === "time" ? clock(d) : day(d) + " " + clock(d);
      el.title = utc(d) + (zone() ? " (shown in " + zone() + ")" : "");
    });
  }

  function statusEl() { return document.querySelector("[data-live-status]"); }

  function render() {
    var el = statusEl();
    if (!el) return;
    var every = parseFloat(el.dataset.every) || 5;
    var silent = Date.now() - last > Math.max(3 * every, 12) * 1000;
    var why = failing || (silent ? "no update for " + Math.round((Date.now() - last) / 1000) + " s" : "");
    var text = el.querySelector("[data-live-text]");
    var at = new Date(last);
    var time = '<time datetime="' + at.toISOString() + '" title="' + utc(at) + '">' + clock(at) + "</time>";
    var html = why ? "stale — last update " + time + ", " + why : "Updated " + time + " · every " + every + " s";
    if (text.innerHTML !== html) text.innerHTML = html;
    var state = why ? "stale" : "live";
    el.classList.toggle("stale", !!why);
    document.body.classList.toggle("is-stale", !!why);
    if (el.dataset.state && el.dataset.state !== state) {
      var say = el.querySelector("[data-live-announce]");
      if (say) say.textContent = why ? "This page is stale: " + why + "." : "Updates are back.";
    }
    el.dataset.state = state;
  }

  function updated() { last = Date.now(); failing = ""; render(); }
  function failed(why) { failing = why; render(); }

  function isPoll(detail) {
    var verb = detail && detail.requestConfig && detail.requestConfig.verb;
    return !verb || verb.toLowerCase() === "get";
  }

  document.addEventListener("htmx:afterRequest", function (event) {
    if (!isPoll(event.detail)) return;
    if (event.detail.successful) updated();
  });
  document.addEventListener("htmx:sendError", function (event) {
    if (isPoll(event.detail)) failed("updates failing (server unreachable)");
  });
  document.addEventListener("htmx:responseError", function (event) {
    if (!isPoll(event.detail)) return;
    var status = event.detail.xhr ? event.detail.xhr.status : "";
    failed("updates failing (HTTP " + status + ")");
  });
  document.addEventListener("htmx:timeout", function (event) {
    if (isPoll(event.detail)) failed("updates failing (timed out)");
  });
  document.addEventListener("gpupool:updated", updated);
  document.addEventListener("gpupool:update-failed", function () { failed("updates failing"); });
  document.addEventListener("htmx:afterSettle", function (event) { localise(event.detail.elt); });

  function ready() {
    if (window.htmx) htmx.config.timeout = 10000;  // a hung poll is a failure, not a wait forever
    localise(document);
    render();
    setInterval(render, 1000);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
})();
