// The usage page's chart: each team's GPU-hours per UTC day as stacked bars, drawn by Chart.js
// (vendor/chart.umd.min.js) from the JSON the page embeds (#usage-data). The table below it holds
// the same numbers as text, so the page says everything without this file.
(function () {
  "use strict";
  var canvas = document.getElementById("usage-chart");
  var source = document.getElementById("usage-data");
  if (!canvas || !source || !window.Chart) return;
  var data = JSON.parse(source.textContent);
  var palette = ["#3451c7", "#e07b39", "#2e9d6a", "#b8427c", "#8a6d1f", "#5a8fd8", "#7b5cc4", "#c24a3b"];
  var teams = Object.keys(data.series);
  new window.Chart(canvas, {
    type: "bar",
    data: {
      labels: data.days,
      datasets: teams.map(function (team, i) {
        return { label: team, data: data.series[team], backgroundColor: palette[i % palette.length] };
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
