// Draws a job's chart (plotly.js from the installed package) and redraws it when htmx swaps the panel.
(function () {
  "use strict";
  function draw() {
    const data = document.getElementById("job-chart-data");
    const target = document.getElementById("job-chart");
    if (!data || !target || !window.Plotly) return;
    const figure = JSON.parse(data.textContent);
    window.Plotly.react(target, figure.data, figure.layout, { displaylogo: false, responsive: true });
    target.dataset.drawn = "true";
  }
  document.addEventListener("DOMContentLoaded", draw);
  document.body.addEventListener("htmx:afterSwap", draw);
  draw();
})();
