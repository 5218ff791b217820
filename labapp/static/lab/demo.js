// The team demo on a projector: sliders that show their value and the chunk sizes they take
// in, the sweep chart filling in live at a readable size, and the A/B answer summed up as
// two large numbers. Words come translated from the page (#demo-labels), colours per chunk
// size from bench/palette.py (#chunk-palette).
(function () {
  "use strict";
  const data = (id) => { const node = document.getElementById(id); return node ? JSON.parse(node.textContent) : {}; };
  const L = data("demo-labels");
  const PALETTE = data("chunk-palette");
  const fill = (template, values) => template.replace(/%\((\w+)\)s/g, (_, key) => String(values[key]));
  const secs = (v) => (v === null || v === undefined || Number.isNaN(v) ? "—" : v >= 10000 ? `${(v / 1000).toFixed(1)} s` : v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${Math.round(v)} ms`);

  function paint(root) {
    root.querySelectorAll("[data-chunk]").forEach((node) => {
      const colour = PALETTE[node.dataset.chunk];
      if (colour) node.style.setProperty("--chunk", colour);
    });
  }
  paint(document);

  // --- the sliders ------------------------------------------------------------------------
  const form = document.querySelector(".demo-sliders");
  const chart = document.getElementById("demo-chart");
  const moved = document.getElementById("demo-moved");
  function showSliders() {
    if (!form) return;
    form.querySelectorAll("input[type=range]").forEach((slider) => {
      const output = slider.parentElement.querySelector("output");
      if (output) output.value = slider.value;
    });
    const largest = Number(form.elements.chunk_size_max.value);
    form.querySelectorAll(".size-keys [data-chunk]").forEach((key) => {
      key.classList.toggle("off", Number(key.dataset.chunk) > largest && key !== form.querySelector(".size-keys [data-chunk]"));
    });
    if (moved && chart) {
      moved.hidden = form.elements.top_k_max.value === chart.dataset.topKMax && form.elements.chunk_size_max.value === chart.dataset.chunkSizeMax;
    }
  }
  if (form) form.querySelectorAll("input[type=range]").forEach((slider) => slider.addEventListener("input", showSliders));
  showSliders();

  // --- the live chart ---------------------------------------------------------------------
  const progress = document.getElementById("demo-progress");
  // Plotly's text at the page's own (big) type size, the chart as tall as its box.
  function bigLayout(layout) {
    const size = parseFloat(getComputedStyle(chart).fontSize) || 20;
    const out = Object.assign({}, layout, { autosize: true, height: chart.clientHeight || undefined, font: { size: Math.round(size * 0.85) } });
    delete out.width;
    out.margin = { t: Math.round(size * 2.4), l: Math.round(size * 3.6), r: Math.round(size), b: Math.round(size * 3.2) };
    // The key sits inside the first panel's top left, where rising TTFT lines leave room.
    out.legend = Object.assign({}, layout.legend, {
      font: { size: Math.round(size * 0.9) }, x: 0.01, y: 0.99, xanchor: "left", yanchor: "top",
      bgcolor: "rgba(255,255,255,0.85)", bordercolor: "#dde2ea", borderwidth: 1,
    });
    out.annotations = (layout.annotations || []).map((a) => Object.assign({}, a, { font: { size: Math.round(size) } }));
    for (const key of Object.keys(layout)) {
      if (/^[xy]axis\d*$/.test(key)) {
        const title = Object.assign({}, layout[key].title, { font: { size: Math.round(size * 0.85) } });
        out[key] = Object.assign({}, layout[key], { title, tickfont: { size: Math.round(size * 0.75) } });
      }
    }
    return out;
  }
  if (progress && chart) {
    let drawn = "";  // the figure last drawn: a later round of questions changes the medians, not the count of points
    let figure = null;
    // The traces come drawn for a projector (bench.plotting.projector: thick lines, hollow markers, wide bars).
    const draw = () => window.Plotly.react(chart, figure.data, bigLayout(figure.layout), { displaylogo: false, displayModeBar: false, responsive: true });
    window.addEventListener("resize", () => { if (figure && window.Plotly) draw(); });
    async function poll() {
      const response = await fetch(`/demo/sweep/${progress.dataset.job}.json`, { headers: { Accept: "application/json" } });
      if (!response.ok) return;
      const m = await response.json();
      progress.dataset.status = m.status;
      progress.querySelector(".state-words").textContent = m.state_text || m.status_label || m.status;
      const bar = progress.querySelector("progress");
      bar.max = m.total || 1;
      bar.value = m.done;
      progress.querySelector(".cell").textContent = m.cell || "";
      const error = progress.querySelector(".error");
      error.textContent = m.error || "";
      error.hidden = !m.error;
      const caption = document.getElementById("demo-caption");
      if (caption) {  // one line per panel, computed from the points by the server
        caption.replaceChildren(...(m.caption || []).map((line) => Object.assign(document.createElement("span"), { textContent: line })));
        caption.hidden = !(m.caption || []).length;
      }
      const shown = JSON.stringify(m.figure || null);
      if (m.figure && shown !== drawn && window.Plotly) {
        figure = m.figure;
        draw();
        drawn = shown;
        chart.dataset.cells = String(m.cells);
      }
        if (["queued", "running"].includes(m.status)) setTimeout(poll, 1500);
    }
    // The chart as the page was made: drawn at once, not after the first poll's round trip.
    const first = document.getElementById("demo-figure");
    const saved = first ? JSON.parse(first.textContent) : null;
    if (saved && window.Plotly) {
      figure = saved;
      draw();
      drawn = JSON.stringify(saved);
    }
    poll();  // the state in words, and the chart again once it has more points
  }

  // --- the A/B result: two large numbers and a split bar each -------------------------------
  const turns = document.getElementById("turns");
  const result = document.getElementById("ab-result");
  if (!turns || !result) return;
  const el = (tag, attrs, text) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  };

  // An answer's parts in ms (chat.js keeps the saved timings on the card as _timings).
  function parts(article) {
    const t = article._timings || {};
    const c = t.client || {}, s = t.server || {};
    const retrieval = t.retrieval_ms || 0;
    const prefill = s.prefill_ms !== null && s.prefill_ms !== undefined ? (s.queue_ms || 0) + s.prefill_ms : c.ttft_ms || 0;
    const decode = s.decode_ms !== null && s.decode_ms !== undefined ? s.decode_ms : c.decode_ms || 0;
    const ttft = c.ttft_ms !== null && c.ttft_ms !== undefined ? c.ttft_ms : null;
    const total = c.e2el_ms !== null && c.e2el_ms !== undefined ? retrieval + c.e2el_ms : retrieval + prefill + decode;
    return { retrieval, prefill, decode, ttft, total };
  }

  function side(name, article, scale) {
    const box = el("div", { class: "ab-side" });
    const settings = article._settings || {};
    box.dataset.chunk = String(settings.chunk_size);
    const head = el("p", { class: "ab-label" });
    head.append(el("strong", {}, name), " ", el("span", { class: "muted" }, `top-k ${settings.top_k}`), " ",
      el("span", { class: "chunk-key", "data-chunk": String(settings.chunk_size) }, fill(L.chunk, { size: settings.chunk_size })));
    box.append(head);
    const finished = article.dataset.status && article.dataset.status !== "streaming";
    if (!finished) {
      box.append(el("p", { class: "ab-number pending" }, "…"), el("p", { class: "muted" }, L.waiting));
      return box;
    }
    const p = parts(article);
    box.append(el("p", { class: "ab-number", "data-ms": String(p.ttft) }, secs(p.ttft)),
      el("p", { class: "ab-caption muted" }, `${L.ttft} · ${L.total} ${secs(p.total)}`));
    const bar = el("div", { class: "split-bar", role: "img" });
    const track = el("div", { class: "split-track" });
    track.style.width = `${(100 * p.total / scale).toFixed(1)}%`;
    const sum = p.retrieval + p.prefill + p.decode || 1;
    for (const part of ["retrieval", "prefill", "decode"]) {
      const seg = el("span", { class: `seg seg-${part}`, title: `${L[part]} ${secs(p[part])}` });
      seg.style.width = `${(100 * p[part] / sum).toFixed(2)}%`;
      track.append(seg);
    }
    bar.setAttribute("aria-label", ["retrieval", "prefill", "decode"].map((k) => `${L[k]} ${secs(p[k])}`).join(", "));
    bar.append(track);
    const legend = el("p", { class: "legend split-legend" });
    for (const part of ["retrieval", "prefill", "decode"]) legend.append(el("span", { class: `key key-${part}` }, `${L[part]} ${secs(p[part])}`));
    box.append(bar, legend);
    return box;
  }

  function percent(a, b) {
    if (!a || b === null || a === null) return null;
    return (100 * (b - a)) / a;
  }

  // A difference read from the back of a room: "16배" once one side takes half again as long
  // (bench's demo.times, the same rounding), a percentage below that ("+35%").
  const TIMES_FROM = 1.5;
  const timesText = (ratio) => (ratio >= 10 ? ratio.toFixed(0) : ratio.toFixed(1).replace(/\.0$/, ""));
  function difference(a, b) {
    const pct = percent(a, b);
    if (pct === null) return null;
    const ratio = b / a;
    if (ratio >= TIMES_FROM) return { sign: "+", big: fill(L.times, { n: timesText(ratio) }), words: fill(L.slower_times, { n: timesText(ratio) }) };
    if (ratio > 0 && 1 / ratio >= TIMES_FROM) return { sign: "-", big: fill(L.times, { n: timesText(1 / ratio) }), words: fill(L.faster_times, { n: timesText(1 / ratio) }) };
    const shown = `${Math.abs(pct).toFixed(0)}%`;
    if (Math.abs(pct) < 5) return { sign: "0", big: shown, words: L.same };
    return { sign: pct > 0 ? "+" : "-", big: `${pct > 0 ? "+" : "−"}${shown}`, words: fill(pct > 0 ? L.slower : L.faster, { pct: shown }) };
  }

  function verdict(a, b) {
    const pa = parts(a), pb = parts(b);
    const diff = difference(pa.ttft, pb.ttft);
    const box = el("div", { class: "ab-diff" });
    if (diff === null) return box;
    box.dataset.sign = diff.sign;
    box.append(el("p", { class: "ab-pct" }, diff.big), el("p", { class: "ab-words" }, diff.words));
    const total = difference(pa.total, pb.total);
    if (total !== null) {
      const shown = total.sign === "0" ? total.words : total.big;
      box.append(el("p", { class: "muted" }, fill(L.total_diff, { a: secs(pa.total), b: secs(pb.total), pct: shown })));
    }
    return box;
  }

  function drawResult() {
    const pairs = turns.querySelectorAll(".turn");
    const turn = pairs[pairs.length - 1];
    const answers = turn ? turn.querySelectorAll(".answer") : [];
    if (!answers.length) { result.hidden = true; return; }
    const [a, b] = answers;
    const finished = [a, b].filter((x) => x && x.dataset.status && x.dataset.status !== "streaming");
    const scale = Math.max(1, ...finished.map((x) => parts(x).total));
    const done = a && b && finished.length === 2;
    const sides = [side(L.setting_a, a, scale), done ? verdict(a, b) : el("div", { class: "ab-diff" }),
      b ? side(L.setting_b, b, scale) : el("div", { class: "ab-side" })];
    result.replaceChildren(...sides);
    paint(result);
    const shownBefore = !result.hidden;
    result.hidden = false;
    result.dataset.done = done ? "true" : "false";
    // On the projector the result shows without scrolling: when a new pair of answers starts (saved,
    // finished ones drawn at load leave the page at its top), the section's heading, the two numbers
    // and the verdict come into view (they sit above the form).
    if (!shownBefore && !done) document.getElementById("demo-compare").scrollIntoView({ block: "start", behavior: "smooth" });
  }

  let queued = false;
  new MutationObserver(() => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; drawResult(); });
  }).observe(turns, { subtree: true, childList: true, attributes: true, attributeFilter: ["data-status"] });
  drawResult();
})();
