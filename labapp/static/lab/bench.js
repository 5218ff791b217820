// Draws a job's charts (plotly.js from the installed package) and redraws them when htmx swaps the panel.
(function () {
  "use strict";
  function draw() {
    if (!window.Plotly) return;
    document.querySelectorAll(".chart[data-figure]").forEach((target) => {
      const data = document.getElementById(target.dataset.figure);
      if (!data) return;
      const figure = JSON.parse(data.textContent);
      window.Plotly.react(target, figure.data, figure.layout, { displaylogo: false, responsive: true });
      target.dataset.drawn = "true";
    });
  }
  document.addEventListener("DOMContentLoaded", draw);
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
  function show(switched) {
    form.querySelectorAll("[data-kinds]").forEach((input) => {
      const row = input.closest(".field");
      if (row) row.hidden = !input.dataset.kinds.split(" ").includes(kind.value);
      const defaults = JSON.parse(input.dataset.defaults || "{}");
      if (!(kind.value in defaults)) return;
      if (input.tagName === "SELECT") {
        if (switched && !input.dataset.touched) input.value = defaults[kind.value];
      } else if (input.type !== "file") {
        input.placeholder = defaults[kind.value];
      }
    });
  }
  form.querySelectorAll("select[data-defaults]").forEach((select) => {
    select.addEventListener("change", () => { select.dataset.touched = "true"; });
  });
  kind.addEventListener("change", () => show(true));
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
