// Measures the websocket round trip (browser -> Daphne -> Redis channel layer -> browser).
(function () {
  const row = document.getElementById("ws-row");
  if (!row) return;
  const state = row.querySelector(".state");
  const show = (ok, text, rtt) => {
    row.className = ok ? "ok" : "down";
    row.dataset.ok = ok ? "true" : "false";
    state.textContent = ok ? state.dataset.ok : state.dataset.bad;
    row.querySelector(".detail").textContent = text;
    row.querySelector(".rtt").textContent = rtt === null ? "" : rtt.toFixed(1) + " ms";
  };
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const socket = new WebSocket(scheme + location.host + row.dataset.url);
  socket.onopen = () => socket.send(JSON.stringify({ type: "ping", sent: performance.now() }));
  socket.onmessage = (event) => {
    const message = JSON.parse(event.data);
    // The consumer says "channel layer" only when the ping went out through it and came back.
    if (message.type === "pong" && message.via === "channel layer") {
      show(true, state.dataset.pongText, performance.now() - message.sent);
      setTimeout(() => socket.send(JSON.stringify({ type: "ping", sent: performance.now() })), 10000);
    } else {
      show(false, message.error || state.dataset.unexpectedText, null);
    }
  };
  socket.onerror = () => show(false, state.dataset.errorText, null);
  socket.onclose = (event) => {
    if (row.dataset.ok !== "true") show(false, state.dataset.closedText.replace("{code}", String(event.code)), null);
  };
})();
