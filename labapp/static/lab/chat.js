// The RAG chat: asks over a websocket, draws tokens as they arrive and the timing panel
// live while an answer streams. Model output only ever goes through textContent.
// The card: a split bar (retrieval | queue | prefill | decode) over one row of key numbers,
// the engine that answered, and the rest behind "more" (vLLM's and the client's numbers side by side).
(function () {
  "use strict";
  const L = JSON.parse(document.getElementById("chat-labels").textContent);
  const saved = JSON.parse(document.getElementById("saved-answers").textContent);
  const turns = document.getElementById("turns");
  const form = document.getElementById("ask-form");
  const formError = document.getElementById("form-error");
  const socketState = document.getElementById("socket-state");
  const live = {}; // client id -> state of an answer being streamed
  let conversation = turns.dataset.conversation ? Number(turns.dataset.conversation) : null;
  let socket = null;
  let counter = 0;

  const el = (tag, attrs, text) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  };
  const num = (v, digits) => (v === null || v === undefined ? "—" : Number(v).toFixed(digits === undefined ? 1 : digits));
  const ms = (v) => (v === null || v === undefined ? "—" : num(v, v >= 100 ? 0 : 1) + " ms");

  function settingsSummary(s) {
    return `top-k ${s.top_k} · ${L.settings_chunk} ${s.chunk_size} · ${L.relevance} ≥ ${s.threshold} · max_tokens ${s.max_tokens} · ${L.settings_temperature} ${s.temperature}` +
      (s.brief ? ` · ${L.settings_brief}` : "") + ` · ${s.collection}`;
  }

  const PARTS = ["retrieval", "queue", "prefill", "decode"];
  const has = (v) => v !== null && v !== undefined;
  const count = (v) => (has(v) ? String(v) : "—");

  // One key number of the compact row: a label and a value (the value carries data-k).
  function keyNumber(key, label, help) {
    const item = el("div", { class: "kn kn-" + key, title: help || label });
    item.append(el("dt", {}, label), el("dd", { "data-k": key }, "—"));
    return item;
  }

  function card(question, settings) {
    const article = el("article", { class: "answer", "data-status": "streaming" });
    const header = el("header");
    header.append(el("h3", { class: "q" }, question), el("p", { class: "settings-summary muted" }, settingsSummary(settings)));
    const actions = el("div", { class: "actions" });
    const stop = el("button", { type: "button", class: "stop" }, L.stop);
    const again = el("button", { type: "button", class: "again", hidden: "" }, L.ask_again);
    actions.append(stop, again, el("span", { class: "status" }, L.retrieving));
    const panel = el("section", { class: "panel", "aria-label": L.panel });
    const bar = el("div", { class: "bar", role: "img", "aria-label": L.bar_help });
    for (const part of PARTS) bar.append(el("span", { class: "seg seg-" + part, title: L[part] }));
    const keys = el("dl", { class: "keynums" });
    keys.append(
      keyNumber("retrieval", L.retrieval, L.retrieval_help),
      keyNumber("queue", L.queue, L.queue_help),
      keyNumber("prefill", L.prefill, L.prefill_help),
      keyNumber("decode", L.decode, L.decode_help),
      keyNumber("tpot", "TPOT", L.tpot),
    );
    const tokens = el("div", { class: "kn kn-tokens", title: L.tokens_help });
    const tokenValue = el("dd");
    tokenValue.append(el("span", { "data-k": "prompt_tokens" }, "—"), " → ", el("span", { "data-k": "output_tokens" }, "—"));
    tokens.append(el("dt", {}, L.tokens_in_out), tokenValue);
    keys.append(tokens, keyNumber("cached_tokens", L.cached_short, L.cached_tokens));
    const engine = el("p", { class: "engine muted" });
    engine.append(el("span", {}, L.engine + " "), el("span", { "data-k": "engine" }, "—"));
    const more = el("details", { class: "more" });
    const table = el("table", { class: "timing" });
    more.append(el("summary", {}, L.more), table);
    panel.append(bar, keys, engine, more);
    const sources = el("details", { class: "sources" });
    sources.append(el("summary", {}, L.sources), el("p", { class: "relevance-help muted" }, L.relevance_help), el("ol"));
    const prompt = el("details", { class: "prompt" });
    prompt.append(el("summary", {}, L.prompt), el("pre"));
    article.append(header, el("ul", { class: "notices" }), el("div", { class: "text" }), el("p", { class: "error", role: "alert" }),
      actions, panel, sources, prompt);
    article._settings = settings;
    article._question = question;
    again.addEventListener("click", () => askAgain(article));
    return article;
  }

  function place(article, parentId) {
    const parent = parentId ? turns.querySelector(`.answer[data-answer-id="${parentId}"]`) : null;
    if (parent) {
      parent.closest(".turn").append(article);
      parent.closest(".turn").classList.add("side-by-side");
    } else {
      const turn = el("div", { class: "turn" });
      turn.append(article);
      turns.append(turn);
    }
    article.scrollIntoView({ block: "nearest" });
  }

  // One row of the "more" table: what, then the vLLM-reported and the client-measured value
  // side by side (one spanning cell when only one side exists); a row is never repeated.
  function row(table, key, label, server, client, help) {
    const tr = el("tr", { "data-row": key, title: help || "" });
    tr.append(el("th", { scope: "row" }, label));
    if (server === undefined) {
      tr.append(el("td", { "data-k": key, colspan: "2" }, client));
    } else {
      tr.append(el("td", { "data-k": key + "_server" }, server), el("td", { "data-k": client.key }, client.value));
    }
    table.append(tr);
  }

  // Which prefill the card shows: vLLM's own when it reported one, else the client's TTFT.
  function prefillOf(t, x) {
    const s = t.server || {}, c = t.client || {};
    if (has(s.prefill_ms)) return { value: s.prefill_ms, label: L.prefill, basis: L.prefill_basis_server };
    if (x.prefillMs !== undefined) return { value: x.prefillMs, label: L.prefill, basis: L.prefill_basis_client };
    return { value: c.ttft_ms, label: "TTFT", basis: L.prefill_basis_client };
  }

  function decodeOf(t, x) {
    const s = t.server || {}, c = t.client || {};
    if (has(s.decode_ms)) return s.decode_ms;
    return x.decodeMs !== undefined ? x.decodeMs : c.decode_ms;
  }

  function setKey(article, key, text, title) {
    const node = article.querySelector(`.keynums [data-k="${key}"]`);
    node.textContent = text;
    if (title) node.parentElement.title = title;
  }

  // t: the saved/final timings; extra: live values while streaming.
  function drawPanel(article, t, extra) {
    const x = extra || {};
    const s = t.server || {}, tok = t.tokens || {};
    const prefill = prefillOf(t, x);
    setKey(article, "retrieval", ms(t.retrieval_ms));
    setKey(article, "queue", has(s.queue_ms) ? ms(s.queue_ms) : (x.streaming ? "…" : "—"), has(s.queue_ms) ? L.queue_help : L.queue_none);
    setKey(article, "prefill", x.ttftLive || ms(prefill.value), `${prefill.basis} — ${L.prefill_help}`);
    article.querySelector(".kn-prefill dt").textContent = prefill.label;
    setKey(article, "decode", x.decodeLive || ms(decodeOf(t, x)), has(s.decode_ms) ? `${L.server} — ${L.decode_help}` : `${L.client} — ${L.decode_help}`);
    const tpot = x.tpotLive || (t.client && has(t.client.tpot_ms) ? `${num(t.client.tpot_ms)} ms/tok` : "—");
    setKey(article, "tpot", tpot);
    setKey(article, "prompt_tokens", count(tok.prompt));
    setKey(article, "output_tokens", x.outputLive !== undefined ? x.outputLive : count(tok.output));
    setKey(article, "cached_tokens", count(tok.cached));
    const engine = t.engine || article._engine;
    article.querySelector('.engine [data-k="engine"]').textContent = engine
      ? (engine.name ? `${engine.name} · ${engine.url}` : engine.url) + (t.model ? ` · ${t.model}` : "") : "—";
    drawMore(article, t, x);
    drawBar(article, t, x, prefill.value);
  }

  function drawMore(article, t, x) {
    const table = article.querySelector("table.timing");
    table.textContent = "";
    const c = t.client || {}, s = t.server || {}, tok = t.tokens || {};
    const head = el("tr");
    head.append(el("th"), el("th", { scope: "col" }, L.server), el("th", { scope: "col" }, L.client));
    table.append(head);
    row(table, "prefill", L.prefill_vs_ttft, ms(s.prefill_ms), { key: "ttft", value: x.ttftLive || ms(c.ttft_ms) }, L.prefill_help);
    row(table, "decode", L.decode, ms(s.decode_ms), { key: "decode_client", value: x.decodeLive || ms(c.decode_ms) }, L.decode_help);
    row(table, "first_chunk", L.first_chunk, undefined, ms(c.first_chunk_ms));
    row(table, "e2el", L.e2el, undefined, ms(c.e2el_ms));
    row(table, "tokens_per_s", L.tokens_per_s, undefined, x.speedLive || num(t.decode_speed));
    row(table, "retrieval_split", L.retrieval_split, undefined,
      t.dense_skipped ? `${L.embed_skipped} + ${L.search} ${ms(t.search_ms)}`
        : has(t.search_ms) ? `${L.embed} ${ms(t.embed_ms)} + ${L.search} ${ms(t.search_ms)}` : "—");
    row(table, "prep", L.prep, undefined, ms(t.prep_ms));
    row(table, "split", L.split, undefined, has(tok.instructions) ? `${tok.instructions} / ${tok.context} / ${tok.question}` : "—");
    const reason = t.finish_reason ? L["finish_" + t.finish_reason] || t.finish_reason : "—";
    row(table, "finish_reason", L.finish_reason, undefined, reason + (t.api ? ` · ${L["api_" + t.api]}` : ""));
    const e = t.estimate;
    row(table, "estimate", L.estimate, undefined,
      e ? `${num(e.prefill_s, 2)} s + ${num(e.decode_s, 2)} s = ${num(e.total_s, 2)} s (${L.measured} ${num(e.measured_s, 2)} s) — ` +
        `${has(e.basis_job) ? L.basis_lab1.replace("{id}", e.basis_job) : e.basis}: ` +
        `${L.prefill} ${num(e.prefill_speed, 0)} tok/s, ${L.decode} ${num(e.decode_speed, 1)} tok/s`
        : (x.streaming ? "…" : L.estimate_none));
    row(table, "websocket", L.websocket, undefined, ms(t.websocket_overhead_ms), L.websocket_help);
  }

  function drawBar(article, t, x, prefill) {
    const s = t.server || {};
    const parts = { retrieval: t.retrieval_ms || 0, queue: s.queue_ms || 0, prefill: prefill || 0, decode: decodeOf(t, x) || 0 };
    const total = Object.values(parts).reduce((a, b) => a + b, 0) || 1;
    for (const [name, value] of Object.entries(parts)) {
      const seg = article.querySelector(".seg-" + name);
      seg.style.width = (100 * value / total).toFixed(2) + "%";
      seg.title = `${L[name]} ${ms(value)}`;
      seg.dataset.ms = value.toFixed(1);
    }
  }

  function drawSources(article, sources) {
    const list = article.querySelector(".sources ol");
    list.textContent = "";
    article.querySelector(".sources summary").textContent = `${L.sources} (${sources.length})`;
    if (!sources.length) list.append(el("li", { class: "muted" }, L.no_sources));
    for (const src of sources) {
      const li = el("li", { "data-chunk": src.id, class: src.in_prompt ? "" : "dropped" });
      const link = el("a", { href: `/passage/?collection=${encodeURIComponent(src.collection)}&id=${encodeURIComponent(src.id)}`, target: "_blank", rel: "noopener" }, src.title);
      const relevance = el("span", { class: "relevance", title: L.relevance_help }, `${L.relevance} ${has(src.relevance) ? Math.round(src.relevance * 100) + "%" : "—"}`);
      const scores = el("span", { class: "scores muted" },
        ` · #${src.rank} · ${L.dense} ${num(src.dense, 2)} (#${src.dense_rank || "—"}) · ${L.lexical} ${num(src.lexical, 1)} (#${src.lexical_rank || "—"}) · ` +
        `${L.fused} ${num(src.fused, 4)} · ${L.tokens} ${count(src.tokens)}` + (src.in_prompt ? "" : ` · ${L.not_in_prompt}`));
      li.append(link, el("br"), relevance, scores, el("blockquote", {}, src.text.length > 280 ? src.text.slice(0, 280) + "…" : src.text));
      list.append(li);
    }
  }

  function drawNotices(article, notices) {
    const list = article.querySelector(".notices");
    list.textContent = "";
    for (const n of notices || []) list.append(el("li", { "data-code": n.code }, n.message));
  }

  function finish(article, a) {
    article.dataset.answerId = a.answer_id;
    article.dataset.status = a.status;
    article.querySelector(".text").textContent = a.text;
    article.querySelector(".error").textContent = a.error || "";
    article.querySelector(".status").textContent = L[a.status] || a.status;
    article.querySelector(".stop").hidden = true;
    article.querySelector(".again").hidden = false;
    article.querySelector(".prompt pre").textContent = a.prompt || "";
    drawNotices(article, (a.timings || {}).notices);
    drawSources(article, a.sources || []);
    drawPanel(article, a.timings || {}, null);
  }

  function askAgain(article) {
    form.elements.question.value = article._question;
    form.elements.parent.value = article.dataset.answerId;
    document.getElementById("parent-note").hidden = false;
    form.scrollIntoView({ block: "center" });
    form.elements.top_k.focus();
  }

  document.getElementById("parent-cancel").addEventListener("click", () => {
    form.elements.parent.value = "";
    document.getElementById("parent-note").hidden = true;
  });

  function tick(id) {
    const st = live[id];
    if (!st) return;
    const now = performance.now();
    const x = { streaming: true };
    if (st.firstAt === null) {
      x.ttftLive = `${L.prefilling} ${((now - st.sentAt) / 1000).toFixed(1)} s`;
      x.prefillMs = now - (st.promptAt || now);
    } else {
      const decodeMs = now - st.firstAt;
      x.decodeLive = `${L.decoding} ${(decodeMs / 1000).toFixed(1)} s`;
      x.decodeMs = decodeMs;
      x.outputLive = st.tokens;
      if (st.tokens > 1) {
        x.tpotLive = ms(decodeMs / (st.tokens - 1));
        x.speedLive = num((st.tokens - 1) / (decodeMs / 1000));
      }
    }
    drawPanel(st.article, st.timings, x);
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + "/ws/chat/");
    socket.onopen = () => { socketState.dataset.state = "open"; socketState.textContent = L.connected; };
    socket.onclose = () => {
      socketState.dataset.state = "closed";
      socketState.textContent = L.disconnected;
      setTimeout(connect, 2000);
    };
    socket.onmessage = (event) => receive(JSON.parse(event.data));
  }

  function receive(m) {
    const st = m.id ? live[m.id] : null;
    if (m.type === "error") {
      if (st && !st.article.dataset.answerId) { st.article.remove(); delete live[m.id]; }
      formError.textContent = m.error;
      return;
    }
    if (m.type === "overhead") {
      const article = turns.querySelector(`.answer[data-answer-id="${m.answer_id}"]`);
      if (article && article._timings) {
        article._timings.websocket_overhead_ms = m.websocket_overhead_ms;
        article._timings.browser = m.browser;
        drawPanel(article, article._timings, null);
      }
      return;
    }
    if (!st) return;
    if (m.type === "started") {
      st.article.dataset.answerId = m.answer_id;
      st.article._engine = m.engine;
      if (!conversation) {
        conversation = m.conversation;
        if (!form.dataset.keepUrl) history.replaceState(null, "", `/chat/${conversation}/`);
      }
    } else if (m.type === "retrieval") {
      st.timings.retrieval_ms = m.retrieval_ms;
      drawSources(st.article, m.sources);
    } else if (m.type === "prompt") {
      st.promptAt = performance.now();
      st.timings.api = m.api;
      st.article.querySelector(".prompt pre").textContent = m.prompt;
      drawNotices(st.article, m.notices);
      drawSources(st.article, m.sources);
      st.article.querySelector(".status").textContent = L.prefilling;
    } else if (m.type === "token") {
      if (st.firstAt === null) {
        st.firstAt = performance.now();
        st.article.querySelector(".status").textContent = L.decoding;
        if (m.ttft_ms !== undefined) st.timings.client = { ttft_ms: m.ttft_ms };
      }
      st.tokens = m.n || st.tokens + 1;
      st.article.querySelector(".text").append(document.createTextNode(m.text));
    } else if (m.type === "done") {
      const doneAt = performance.now();
      clearInterval(st.timer);
      delete live[m.id];
      const a = m.answer;
      st.article._timings = a.timings || {};
      finish(st.article, a);
      if (st.then && a.answer_id) ask(st.then.question, st.then.settings, a.answer_id, null);
      if (socket.readyState === WebSocket.OPEN) {
        socket.send(JSON.stringify({
          type: "client_timing", answer_id: a.answer_id,
          first_token_ms: st.firstAt === null ? null : Math.round((st.firstAt - st.sentAt) * 10) / 10,
          done_ms: Math.round((doneAt - st.sentAt) * 10) / 10,
        }));
      }
    }
  }

  function formSettings() {
    const f = form.elements;
    return {
      collection: f.collection.value,
      top_k: Number(f.top_k.value),
      chunk_size: Number(f.chunk_size.value),
      threshold: Number(f.threshold.value),
      brief: f.brief.checked,
      max_tokens: Number(f.max_tokens.value),
      temperature: Number(f.temperature.value),
    };
  }

  // The demo page's form also has a second setting ("b"): its answer is asked when the first
  // one is done, and drawn beside it, so the two never share the engine while being timed.
  function formSettingsB() {
    const f = form.elements;
    if (!f.top_k_b) return null;
    return Object.assign(formSettings(), { top_k: Number(f.top_k_b.value), chunk_size: Number(f.chunk_size_b.value) });
  }

  function ask(question, settings, parent, then) {
    const id = `a${Date.now().toString(36)}${(counter++).toString(36)}`;
    const article = card(question, settings);
    article.dataset.cid = id;
    place(article, parent);
    const st = { article, sentAt: performance.now(), promptAt: null, firstAt: null, tokens: 0, timings: {}, timer: null, then };
    live[id] = st;
    article.querySelector(".stop").addEventListener("click", () => socket.send(JSON.stringify({ type: "stop", id })));
    st.timer = setInterval(() => tick(id), 200);
    drawPanel(article, st.timings, { streaming: true });
    socket.send(JSON.stringify({ type: "ask", id, question, settings, conversation, parent }));
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    formError.textContent = "";
    const question = form.elements.question.value;
    if (!question.trim()) { formError.textContent = L.question_empty; return; }
    if (!socket || socket.readyState !== WebSocket.OPEN) { formError.textContent = L.disconnected; return; }
    const parent = form.elements.parent.value ? Number(form.elements.parent.value) : null;
    const second = formSettingsB();
    ask(question.trim(), formSettings(), parent, second ? { question: question.trim(), settings: second } : null);
    form.elements.parent.value = "";
    document.getElementById("parent-note").hidden = true;
  });

  for (const a of saved) {
    const article = card(a.question, a.settings);
    place(article, a.parent_id);
    article._timings = a.timings || {};
    finish(article, a);
  }
  connect();
})();
