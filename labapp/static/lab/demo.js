// The sweep's sliders show their value in the <output> next to them.
(function () {
  "use strict";
  document.querySelectorAll(".demo-sliders input[type=range]").forEach((slider) => {
    const output = slider.nextElementSibling;
    if (output && output.tagName === "OUTPUT") slider.addEventListener("input", () => { output.value = slider.value; });
  });
})();
// The demo's sweep chart: polls the job's finished cells and redraws as each one lands.
(function () {
  "use strict";
  const progress = document.getElementById("demo-progress");
  const target = document.getElementById("demo-chart");
  if (!progress || !target) return;
  let drawnCells = -1;
  async function poll() {
    const response = await fetch(`/demo/sweep/${progress.dataset.job}.json`, { headers: { Accept: "application/json" } });
    if (!response.ok) return;
    const m = await response.json();
    progress.dataset.status = m.status;
    progress.querySelector(".state").textContent = (m.status_label || m.status) + (m.error ? `: ${m.error}` : "");
    progress.querySelector(".count").textContent = `${m.done}/${m.total}`;
    progress.querySelector(".cell").textContent = m.cell || "";
    if (m.figure && m.cells !== drawnCells && window.Plotly) {
      window.Plotly.react(target, m.figure.data, m.figure.layout, { displaylogo: false, responsive: true });
      drawnCells = m.cells;
      target.dataset.cells = String(m.cells);
    }
    if (["queued", "running"].includes(m.status)) setTimeout(poll, 1500);
  }
  poll();
})();
