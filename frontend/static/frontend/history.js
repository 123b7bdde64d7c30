// Charts, drawn with Chart.js from the JSON of history.selectors: the history pages' charts (when a
// range is picked, the same JSON is fetched from the API and the charts redrawn in place), and the
// overview's small utilisation charts (`canvas[data-sparkline]`, redrawn when HTMX swaps them).
// The range links work without this file (a page load); the text summaries are in the HTML.
(function () {
  "use strict";
  if (!window.Chart) return;

  // The dashboard's own state colours (app.css), so a series reads the same as its badge.
  var COLORS = {
    held: "#1c5fb0", guaranteed: "#1f7a3a", limit: "#b42318", borrowed: "#b44d12",
    allocated: "#1c5fb0", free: "#1f7a3a", capacity: "#4b525b", util_pct: "#3451c7",
    queue_length: "#6b3fc9", pending_gpus: "#b44d12", wait_s: "#1c5fb0", wait_max_s: "#b42318",
    memory_used_mb: "#0f6e6e", temperature_c: "#b44d12", power_w: "#6b3fc9"
  };
  // Ceilings and references are dashed, so they are told apart without colour.
  var DASHED = { guaranteed: [6, 4], limit: [2, 3], capacity: [6, 4], wait_max_s: [4, 3] };
  var PALETTE = window.gpupoolPalette;  // palette.js: series without a colour of their own

  function fmt(v) {
    return Math.round(v * 10) / 10 + "";
  }

  function summaryText(s, sep) {
    var m = s.summary;
    if (m.latest === null) return "no data";
    return "now " + fmt(m.latest) + sep + "mean " + fmt(m.mean) + sep + "peak " + fmt(m.peak);
  }

  function ariaText(chart) {
    return chart.title + ": " + chart.series.map(function (s) {
      return s.label + " " + summaryText(s, ", ");
    }).join("; ");
  }

  // Times on the axes and in the tooltips are the viewer's own (the tooltip adds UTC).
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function local(ms) {
    var d = new Date(ms);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + pad(d.getHours()) + ":" +
      pad(d.getMinutes());
  }

  function timeLabel(ms, span) {
    var text = local(ms);
    if (span <= 2 * 86400000) return text.slice(11, 16);
    return text.slice(5, 10) + (span <= 8 * 86400000 ? " " + text.slice(11, 13) + "h" : "");
  }

  // A sparkline: the overview's small chart, 0–100 %, its time axis written under it in HTML.
  function compact(options) {
    options.scales.x.display = false;
    options.scales.y = { min: 0, max: 100, ticks: { maxTicksLimit: 3, callback: function (v) { return v + "%"; } } };
    options.plugins.legend = { display: false };
    return options;
  }

  function config(chart, history) {
    var xs = chart.at.map(Date.parse);
    var start = Date.parse(history.start);
    var end = Date.parse(history.end);
    return {
      type: "line",
      data: {
        datasets: chart.series.map(function (s, i) {
          var color = COLORS[s.key] || PALETTE.color(i);
          return {
            label: s.label, borderColor: color, backgroundColor: color, borderWidth: 2,
            borderDash: DASHED[s.key] || (COLORS[s.key] ? [] : PALETTE.dash(i)), pointRadius: xs.length <= 3 ? 3 : 0, tension: 0,
            order: DASHED[s.key] ? -1 : 0,  // references (guarantee, limit) are drawn over the data
            spanGaps: false,  // a gap in the data is a gap in the line, not a guess
            data: xs.map(function (x, j) { return { x: x, y: s.values[j] }; })
          };
        })
      },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: false, normalized: true,
        interaction: { mode: "index", intersect: false },
        scales: {
          x: {
            type: "linear", min: start, max: end,
            ticks: { maxTicksLimit: 6, callback: function (v) { return timeLabel(v, end - start); } }
          },
          y: { beginAtZero: true, suggestedMax: chart.unit === "%" ? 100 : undefined,
               title: { display: true, text: chart.unit } }
        },
        plugins: {
          // In the series' own order, whatever order they are drawn in.
          legend: { position: "bottom", labels: { boxWidth: 12, sort: function (a, b) { return a.datasetIndex - b.datasetIndex; } } },
          tooltip: {
            callbacks: {
              title: function (items) {
                if (!items.length) return "";
                var ms = items[0].parsed.x;
                return local(ms) + " (" + new Date(ms).toISOString().slice(11, 16) + " UTC)";
              }
            }
          }
        }
      }
    };
  }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function figure(chart) {
    var fig = el("figure", "card history-chart");
    fig.dataset.chartId = chart.id;
    var caption = el("figcaption");
    caption.appendChild(el("b", "", chart.title));
    caption.appendChild(document.createTextNode(" "));
    caption.appendChild(el("span", "muted", "(" + chart.unit + ")"));
    var box = el("div", "canvas-box");
    var canvas = el("canvas");
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", ariaText(chart));
    box.appendChild(canvas);
    var list = el("ul", "chart-summary");
    chart.series.forEach(function (s) {
      var item = el("li");
      item.appendChild(el("span", "", s.label));
      item.appendChild(el("span", s.summary.latest === null ? "muted" : "num", summaryText(s, " · ")));
      list.appendChild(item);
    });
    fig.appendChild(caption);
    fig.appendChild(box);
    fig.appendChild(list);
    return fig;
  }

  function note(history) {
    var what = history.step_s === 60 ? "1-minute points" : "Hourly means";
    var when = function (iso) { return iso.slice(0, 10) + " " + iso.slice(11, 16); };
    return what + " from " + when(history.start) + " to " + when(history.end) + " UTC.";
  }

  // Rebuild the figures from `history` and draw them (the first time too, so the page and a
  // range change take the same path).
  function render(section, history) {
    var holder = section.querySelector("[data-history-charts]");
    destroyIn(holder);
    holder.replaceChildren();
    if (!history.charts.length) {
      holder.appendChild(el("div", "card empty", "No history in this range yet: points are recorded once a minute."));
    }
    history.charts.forEach(function (chart) {
      var fig = figure(chart);
      holder.appendChild(fig);
      new window.Chart(fig.querySelector("canvas"), config(chart, history));
    });
    section.querySelector("[data-history-note]").textContent = note(history);
    section.querySelectorAll("a[data-range]").forEach(function (link) {
      if (link.dataset.range === history.range) link.setAttribute("aria-current", "true");
      else link.removeAttribute("aria-current");
    });
    section.dataset.drawn = history.range;  // tests (and curious readers) see what is drawn
  }

  function pick(section, link) {
    var range = link.dataset.range;
    section.setAttribute("aria-busy", "true");
    fetch(section.dataset.apiUrl + "?range=" + encodeURIComponent(range),
          { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("history " + response.status);
        return response.json();
      })
      .then(function (history) {
        render(section, history);
        window.history.replaceState(null, "", "?range=" + encodeURIComponent(range));
      })
      .catch(function () { window.location.href = link.href; })  // the page load still works
      .finally(function () { section.removeAttribute("aria-busy"); });
  }

  // The charts follow the clock: the range drawn is fetched again every minute (points are
  // recorded once a minute); live.js hears whether that worked and says so on the page.
  var REFRESH_MS = 60000;

  function refresh(section) {
    if (document.visibilityState !== "visible" || section.getAttribute("aria-busy")) return;
    var range = section.dataset.drawn || "24h";
    fetch(section.dataset.apiUrl + "?range=" + encodeURIComponent(range),
          { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("history " + response.status);
        return response.json();
      })
      .then(function (history) {
        if (section.dataset.drawn === range) render(section, history);  // unless a click moved on
        document.dispatchEvent(new CustomEvent("gpupool:updated"));
      })
      .catch(function () { document.dispatchEvent(new CustomEvent("gpupool:update-failed")); });
  }

  function start() {
    var section = document.querySelector("[data-history]");
    var data = document.getElementById("history-data");
    if (!section || !data) return;
    render(section, JSON.parse(data.textContent));
    setInterval(function () { refresh(section); }, REFRESH_MS);
    section.addEventListener("click", function (event) {
      var link = event.target.closest("a[data-range]");
      if (!link || event.ctrlKey || event.metaKey || event.shiftKey) return;
      event.preventDefault();
      pick(section, link);
    });
  }

  function destroyIn(root) {
    root.querySelectorAll("canvas").forEach(function (canvas) {
      var old = window.Chart.getChart(canvas);
      if (old) old.destroy();
    });
  }

  function drawSparklines() {
    document.querySelectorAll("canvas[data-sparkline]").forEach(function (canvas) {
      if (window.Chart.getChart(canvas)) return;
      var history = JSON.parse(canvas.dataset.chart);
      var spec = config(history.charts[0], history);
      spec.options = compact(spec.options);
      new window.Chart(canvas, spec);
    });
  }

  // HTMX replaces the overview every few seconds: free the old charts, draw the new ones.
  document.addEventListener("htmx:beforeSwap", function (event) { destroyIn(event.detail.target); });
  document.addEventListener("htmx:afterSettle", drawSparklines);

  function ready() {
    start();
    drawSparklines();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
})();
