// The usage page's chart: each team's GPU-hours per UTC day as stacked bars, drawn by Chart.js
// (vendor/chart.umd.min.js) from the JSON the page embeds (#usage-data). The table below it holds
// the same numbers as text, so the page says everything without this file.
(function () {
  "use strict";
  var canvas = document.getElementById("usage-chart");
  var source = document.getElementById("usage-data");
  if (!canvas || !source || !window.Chart) return;
  var data = JSON.parse(source.textContent);
  var palette = window.gpupoolPalette;  // palette.js: 30 teams told apart (colour × pattern)
  var teams = Object.keys(data.series);
  new window.Chart(canvas, {
    type: "bar",
    data: {
      labels: data.days,
      datasets: teams.map(function (team, i) {
        return { label: team, data: data.series[team], backgroundColor: palette.fill(i),
                 borderColor: palette.color(i), borderWidth: 1 };
      }),
    },
    options: {
      responsive: true,
      maintainAspectRatio: false,
      animation: false, // drawn at once: nothing to wait for (and the browser test reads the pixels)
      scales: {
        x: { stacked: true },
        y: { stacked: true, beginAtZero: true, title: { display: true, text: "GPU-hours" } },
      },
      plugins: { legend: { position: "bottom" } },
    },
  });
})();
