// Draws a job's charts (plotly.js, vendored: templates/plotly_script.html) once, with their final layout,
// and redraws them in place (Plotly.react) when htmx swaps the panel with new results.
//
// Why a swapped panel used to look garbled for a few seconds: htmx "settles" an element that
// keeps its id (#job-chart) by first giving the new element the old one's attributes, then,
// 20 ms later, its own. Plotly drew on htmx:afterSwap, inside that window, and marked the div
// with the class "js-plotly-plot" that all of its CSS hangs on; the settle then put back
// class="chart", so the toolbar icons stacked over the plot and the axis titles lost their
// places until the next redraw. Now the drawn element itself is kept across the swap (it takes
// the new, empty one's place before htmx settles) and only its data and layout change.
(function () {
  "use strict";
  const CONFIG = { displaylogo: false, displayModeBar: false, responsive: true };
  let kept = new Map();  // id -> a drawn chart element from before the swap
  const watcher = window.ResizeObserver
    ? new ResizeObserver((entries) => {
      entries.forEach((entry) => {
        const chart = entry.target;
        if (!window.Plotly || chart.offsetWidth === 0) return;
        if (chart.dataset.drawn) window.Plotly.Plots.resize(chart);
        else drawOne(chart);
      });
    })
    : null;
  function drawOne(target) {
    const data = document.getElementById(target.dataset.figure);
    if (!data) return;
    const figure = JSON.parse(data.textContent);
    const height = figure.layout && figure.layout.height;
    if (height) {  // the box is exactly as tall as the chart: no blank band under it
      target.style.height = `${height}px`;
      target.style.minHeight = "0";
    }
    if (target.offsetWidth === 0) return;  // hidden: drawn when it is shown (the resize watcher)
    window.Plotly.react(target, figure.data, figure.layout, CONFIG);
    target.dataset.drawn = "true";
  }
  function draw() {
    if (!window.Plotly) return;
    document.querySelectorAll(".chart[data-figure]").forEach((target) => {
      const before = target.id && kept.get(target.id);
      if (before && before !== target) {
        before.dataset.figure = target.dataset.figure;
        target.replaceWith(before);
        target = before;
      }
      drawOne(target);
      if (watcher && !target.dataset.watched) {
        watcher.observe(target);
        target.dataset.watched = "true";
      }
    });
    kept = new Map();
  }
  document.addEventListener("DOMContentLoaded", draw);
  document.body.addEventListener("htmx:beforeSwap", () => {
    kept = new Map();
    document.querySelectorAll(".chart[data-drawn]").forEach((chart) => { if (chart.id) kept.set(chart.id, chart); });
  });
  document.body.addEventListener("htmx:afterSwap", draw);
  draw();
})();
// The job form shows only the settings of the chosen kind, each with that kind's default
// (data-defaults: a placeholder, or a choice's selected option until it is changed by hand);
// every field keeps what was typed in it.
(function () {
  "use strict";
  const form = document.getElementById("job-form");
  if (!form) return;
  const kind = form.querySelector("select[name=kind]");
  function valueOf(name) {
    const checked = form.querySelector(`input[name="${name}"]:checked`);
    if (checked) return checked.value;
    const input = form.elements.namedItem(name);
    return input && "value" in input ? input.value : "";
  }
  function wanted(input) {
    // The kind reads this setting, and the setting it depends on (data-when) has a matching value.
    if (!input.dataset.kinds.split(" ").includes(kind.value)) return false;
    const when = JSON.parse(input.dataset.when || "{}")[kind.value];
    return !when || when.values.includes(valueOf(when.field));
  }
  function show(switched) {
    form.querySelectorAll("[data-kinds]").forEach((input) => {
      const row = input.closest(".field");
      if (row) {
        row.hidden = !wanted(input) && !row.querySelector(".error");  // a setting with an error stays in view
        row.style.display = row.hidden ? "none" : "";  // a display rule on .field would beat [hidden]
      }
      const defaults = JSON.parse(input.dataset.defaults || "{}");
      if (!(kind.value in defaults)) return;
      if (input.tagName === "SELECT") {
        if (switched && !input.dataset.touched) input.value = defaults[kind.value];
      } else if (input.type === "radio") {
        if (switched && !input.dataset.touched) input.checked = input.value === defaults[kind.value];
      } else if (input.type !== "file") {
        input.placeholder = defaults[kind.value];
      }
    });
  }
  form.querySelectorAll("select[data-defaults]").forEach((select) => {
    select.addEventListener("change", () => { select.dataset.touched = "true"; });
  });
  form.querySelectorAll("input[type=radio][data-defaults]").forEach((radio) => {
    radio.addEventListener("change", () => {
      form.querySelectorAll(`input[type=radio][name="${radio.name}"]`).forEach((r) => { r.dataset.touched = "true"; });
    });
  });
  kind.addEventListener("change", () => { show(true); show(false); });  // the defaults first, then what they show
  form.addEventListener("change", (event) => { if (event.target !== kind) show(false); });
  show(false);
})();
// Progress pushed over a websocket moves the bar at once; the panel also polls the job row
// every few seconds, so the page stays right when the push (Redis) is down. A dropped socket
// reconnects while the job is still queued or running.
(function () {
  "use strict";
  const first = document.getElementById("job-state");
  if (!first || !["queued", "running"].includes(first.dataset.status)) return;
  const job = first.dataset.job;
  const active = () => {
    const state = document.getElementById("job-state");
    return state && ["queued", "running"].includes(state.dataset.status);
  };
  let finished = false;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(`${scheme}${location.host}/ws/bench/${job}/`);
    socket.onmessage = (event) => {
      const m = JSON.parse(event.data);
      const bar = document.getElementById("job-progress");
      if (bar && m.total) {
        bar.max = m.total;
        bar.value = m.done;
        document.getElementById("job-count").textContent = `${m.done}/${m.total} (${Math.round(100 * m.done / m.total)}%)`;
        document.getElementById("job-cell").textContent = m.cell || "";
        bar.dataset.pushed = "true";
        document.body.dataset.pushes = String(Number(document.body.dataset.pushes || 0) + 1);
      }
      if (!["queued", "running"].includes(m.status)) {
        finished = true;
        document.body.dispatchEvent(new Event("job-changed"));  // redraw the panel with the results
        socket.close();
      }
    };
    socket.onclose = () => { if (!finished && active()) setTimeout(connect, 1000); };
  }
  connect();
})();
