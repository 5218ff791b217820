// The RAG chat: asks over a websocket, draws tokens as they arrive and the timing panel
// live while an answer streams. Model output only ever goes through textContent.
// The card: a split bar (retrieval | queue | prefill | decode) over one row of key numbers,
// the engine that answered, and the rest behind "more" (vLLM's report and the client's measures in groups apart).
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
    const retry = el("button", { type: "button", class: "retry", hidden: "" }, L.retry_now);
    actions.append(stop, again, retry, el("span", { class: "status" }, L.retrieving));
    // The chat admission's line (rag/admission.py): position and expected wait, read out as they change.
    const line = el("p", { class: "queue-state", role: "status", "aria-live": "polite", hidden: "" });
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
    article.append(header, line, el("ul", { class: "notices" }), el("div", { class: "text" }), el("p", { class: "error", role: "alert" }),
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

  // The "more" table: the groups and rows the page declares (rag.views.details_layout), vLLM's
  // per-request metrics apart from what this server measured on the stream, one value per row.
  function detailValues(t, x) {
    const c = t.client || {}, s = t.server || {}, tok = t.tokens || {}, e = t.estimate;
    const reason = t.finish_reason ? L["finish_" + t.finish_reason] || t.finish_reason : "—";
    return {
      queue_server: has(s.queue_ms) ? ms(s.queue_ms) : (x.streaming ? "…" : L.queue_none),
      prefill_server: ms(s.prefill_ms),
      decode_server: ms(s.decode_ms),
      ttft: x.ttftLive || ms(c.ttft_ms),
      first_chunk: ms(c.first_chunk_ms),
      decode_client: x.decodeLive || ms(c.decode_ms),
      e2el: ms(c.e2el_ms),
      tpot: x.tpotLive || (has(c.tpot_ms) ? `${num(c.tpot_ms)} ms/tok` : "—"),
      tokens_per_s: x.speedLive || num(t.decode_speed),
      prompt_tokens: count(tok.prompt),
      split: has(tok.instructions) ? `${tok.instructions} / ${tok.context} / ${tok.question}` : "—",
      cached_tokens: has(tok.cached) ? String(tok.cached) : (L["cached_" + t.cached_state] || "—"),
      output_tokens: x.outputLive !== undefined ? String(x.outputLive) : count(tok.output),
      finish_reason: reason + (t.api ? ` · ${L["api_" + t.api]}` : ""),
      retrieval_split: t.dense_skipped ? `${L.embed_skipped} + ${L.search} ${ms(t.search_ms)}`
        : has(t.search_ms) ? `${L.embed} ${ms(t.embed_ms)} + ${L.search} ${ms(t.search_ms)}` : "—",
      admission_wait: admissionWait(t, x),
      prep: ms(t.prep_ms),
      estimate: e ? `${num(e.prefill_s, 2)} s + ${num(e.decode_s, 2)} s = ${num(e.total_s, 2)} s (${L.measured} ${num(e.measured_s, 2)} s) — ` +
        `${has(e.basis_job) ? L.basis_lab1.replace("{id}", e.basis_job) : e.basis}: ` +
        `${L.prefill} ${num(e.prefill_speed, 0)} tok/s, ${L.decode} ${num(e.decode_speed, 1)} tok/s` +
        (e.cached_known === false ? ` (${L.estimate_cached_unknown})` : "") + estimateOff(e.off)
        : (x.streaming ? "…" : estimateMissing(t.estimate_state)),
      websocket: ms(t.websocket_overhead_ms),
    };
  }

  // Why an estimate far from the measurement missed (rag.chat.estimate_off): the half, and its two speeds.
  function estimateOff(off) {
    if (!off) return "";
    const words = L["estimate_off_" + off.half] || "";
    return ". " + words.replace("{ratio}", num(off.ratio, 1)).replace("{answer}", num(off.answer_speed, 1))
      .replace("{lab}", num(off.lab_speed, 1));
  }

  // Why an answer has no estimate, from the state the server saved (an old answer has none: no speeds).
  function estimateMissing(state) {
    if (state === undefined || state === "no_speeds") return L.estimate_none;
    return L["estimate_" + state] || "—";
  }

  const HELP = { admission_wait: "admission_wait_help", prefill_server: "prefill_help", ttft: "prefill_help", decode_server: "decode_help", decode_client: "decode_help", websocket: "websocket_help" };

  function drawMore(article, t, x) {
    const table = article.querySelector("table.timing");
    table.textContent = "";
    const values = detailValues(t, x);
    for (const [groupKey, group] of Object.entries(L.details)) {
      const body = el("tbody", { "data-group": groupKey });
      const head = el("tr");
      head.append(el("th", { scope: "colgroup", colspan: "2" }, group.label));
      body.append(head);
      for (const [key, label] of Object.entries(group.rows)) {
        const tr = el("tr", { "data-row": key, title: HELP[key] ? L[HELP[key]] : "" });
        tr.append(el("th", { scope: "row" }, label), el("td", { "data-k": key }, values[key]));
        body.append(tr);
      }
      table.append(body);
    }
  }

  // The wait in the admission's line: its own row, never part of TTFT (docs/metrics.md).
  function admissionWait(t, x) {
    if (x.waitingLive) return x.waitingLive;
    return has(t.queue_wait_ms) ? ms(t.queue_wait_ms) : L.admission_none;
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

  const clip = (text) => (text.length > 280 ? text.slice(0, 280) + "…" : text);

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
      li.append(link, el("br"), relevance, scores, el("blockquote", {}, clip(src.shown === undefined ? src.text : src.shown)));
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
    // An answer with no text says why where the text would be, and opens what was retrieved.
    const empty = ((a.timings || {}).notices || []).find((n) => n.code === "empty");
    if (empty && !a.text.trim()) {
      article.querySelector(".text").textContent = empty.message;
      article.querySelector(".text").classList.add("empty-answer");
      article.querySelector(".sources").open = true;
    }
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
    if (st.waiting) {
      x.waitingLive = `${L.waiting} ${((now - st.sentAt) / 1000).toFixed(1)} s`;
    } else if (st.firstAt === null) {
      x.ttftLive = `${L.prefilling} ${((now - (st.admittedAt || st.sentAt)) / 1000).toFixed(1)} s`;
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
      for (const id of Object.keys(live)) cutOff(live[id], id);
      setTimeout(connect, 2000);
    };
    socket.onmessage = (event) => receive(JSON.parse(event.data));
  }

  // The admission's frames: waiting in line (position, expected wait), admitted, or refused at once.
  function queued(st, m) {
    const article = st.article;
    st.waiting = true;
    article.dataset.status = "queued";
    article.querySelector(".status").textContent = L.waiting;
    article.querySelector(".stop").textContent = L.cancel_wait;
    const line = article.querySelector(".queue-state");
    const wait = m.wait_s === null || m.wait_s === undefined ? L.queue_wait_unknown : L.queue_wait.replace("{seconds}", m.wait_s);
    line.textContent = `${L.queue_position.replace("{position}", m.position)} · ${wait}. ${L.queue_slots.replace("{slots}", m.slots)}`;
    line.dataset.position = m.position;
    line.hidden = false;
  }

  function admitted(st, m) {
    const article = st.article;
    st.waiting = false;
    st.admittedAt = performance.now();
    article.dataset.status = "streaming";
    article.querySelector(".status").textContent = L.retrieving;
    article.querySelector(".stop").textContent = L.stop;
    const line = article.querySelector(".queue-state");
    line.textContent = L.admitted.replace("{seconds}", num(m.waited_ms / 1000, 1));
    delete line.dataset.position;
  }

  // A live card that ends without an answer (refused, or cut off with its socket): its timer stopped,
  // forgotten, its status and message set, the queue line and Stop hidden; its "ask again" button shown.
  function endCard(st, id, status, label, message) {
    const article = st.article;
    clearInterval(st.timer);
    delete live[id];
    article.dataset.status = status;
    article.querySelector(".status").textContent = label;
    article.querySelector(".error").textContent = message;
    article.querySelector(".queue-state").hidden = true;
    article.querySelector(".stop").hidden = true;
    const retry = article.querySelector(".retry");
    retry.hidden = false;
    return retry;
  }

  function refused(st, m, id) {
    const article = st.article;
    const retry = endCard(st, id, "refused", L.refused, m.error);
    let left = m.retry_s || 0;
    const count = () => {
      retry.disabled = left > 0;
      retry.textContent = left > 0 ? L.retry_in.replace("{seconds}", left) : L.retry_now;
    };
    count();
    const timer = left > 0 ? setInterval(() => { left -= 1; count(); if (left <= 0) clearInterval(timer); }, 1000) : null;
    retry.addEventListener("click", () => {
      if (timer) clearInterval(timer);
      const turn = article.closest(".turn");
      article.remove();
      if (turn && !turn.querySelector(".answer")) turn.remove();
      ask(article._question, article._settings, null, null);
    });
    drawPanel(article, {}, null);
  }

  // The socket closed while this answer streamed or waited (its web process gone, or the network): the
  // text shown stays, and the server saves what it had written as stopped (rag/keeper.py). "Ask again"
  // sends the same question once the socket is back, beside this card when it has a saved row.
  function cutOff(st, id) {
    const article = st.article;
    const retry = endCard(st, id, "cut", L.cut_off, L.cut_off_help);
    retry.disabled = false;
    retry.textContent = L.retry_now;
    retry.addEventListener("click", () => {
      if (!socket || socket.readyState !== WebSocket.OPEN) { formError.textContent = L.disconnected; return; }
      retry.hidden = true;
      const parent = article.dataset.answerId ? Number(article.dataset.answerId) : null;
      if (!parent) {
        const turn = article.closest(".turn");
        article.remove();
        if (turn && !turn.querySelector(".answer")) turn.remove();
      }
      ask(article._question, article._settings, parent, null);
    });
    // What the page measured until the cut: the decode so far, its tokens and their pace.
    const x = {};
    if (st.firstAt !== null) {
      x.decodeMs = st.lastAt - st.firstAt;
      x.outputLive = st.tokens;
      if (st.tokens > 1) x.tpotLive = ms(x.decodeMs / (st.tokens - 1));
    }
    drawPanel(article, st.timings, x);
  }

  function receive(m) {
    const st = m.id ? live[m.id] : null;
    if (m.type === "refused") {
      if (st) refused(st, m, m.id); else formError.textContent = m.error;
      return;
    }
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
    if (m.type === "queued") {
      queued(st, m);
    } else if (m.type === "admitted") {
      admitted(st, m);
    } else if (m.type === "started") {
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
      st.lastAt = performance.now();
      st.article.querySelector(".text").append(document.createTextNode(m.text));
    } else if (m.type === "done") {
      const doneAt = performance.now();
      st.waiting = false;
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
