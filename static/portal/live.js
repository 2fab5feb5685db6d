// One WebSocket helper for every live page: reconnects with backoff, shows the state in
// the navbar, and hands each JSON message to the page, newest of each thing only. On every
// (re)connect the server sends the current state as the same events (a snapshot), so what
// changed while the socket was down is shown. `onOpen(ws)` lets a page resume (the job log
// sends the last seq it has).
window.PortalLive = (function () {
  const LABELS = {
    connecting: ["● connecting…", "live updates: connecting"],
    open: ["● live", "live updates: on"],
    closed: ["● reconnecting…", "live updates: connection lost, reconnecting"],
    refused: ["● not allowed", "live updates: refused (signed out, or your role changed): reload the page"],
  };
  // The indicator stays hidden on pages that never open a socket.
  function setStatus(state) {
    const el = document.getElementById("live-status");
    if (!el) return;
    el.hidden = false;
    el.dataset.state = state;
    el.textContent = LABELS[state][0];
    el.title = LABELS[state][1];
  }
  // `options.quiet`: a socket every page opens (the header's) leaves the indicator to the
  // page's own socket, if it has one.
  // Each message names one thing (an event and the lane, node, job... it is about) and is
  // stamped by the server (core.broadcast.group_message; a (re)connect's snapshot with when it
  // began reading): the newest seen of each thing wins, so a message that arrives after a
  // newer one — or after the snapshot — never puts an older state back.
  function thing(msg) {
    const d = msg.data || {};
    return msg.event + "|" + (d.name !== undefined ? d.name : d.id !== undefined ? d.id : "") +
      (d.position !== undefined ? "|" + d.job + "|" + d.position : "");
  }
  function connect(path, onMessage, onOpen, options) {
    const quiet = Boolean(options && options.quiet);
    const newest = {};
    function stale(msg) {
      if (typeof msg.at !== "number") return false;
      const key = thing(msg);
      if (newest[key] !== undefined && msg.at < newest[key]) return true;
      newest[key] = msg.at;
      return false;
    }
    const status = quiet ? function () {} : setStatus;
    let delay = 500;
    let stopped = false;
    let ws = null;
    function open() {
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      ws = new WebSocket(scheme + location.host + path);
      if (delay === 500) status("connecting");  // retries keep saying "reconnecting"
      let opened = false;
      ws.onopen = function () { opened = true; delay = 500; status("open"); if (onOpen) onOpen(ws); };
      ws.onmessage = function (e) {
        const msg = JSON.parse(e.data);
        if (stale(msg)) return;
        onMessage(msg, ws);
      };
      ws.onclose = function (e) {
        if (e.code === 4401 || e.code === 4403) { status("refused"); return; }
        if (stopped) return;
        if (opened) { retry(); return; }
        // A refused handshake looks like a network error (1006) to the page: ask the API
        // whether this session may still read, so a lost role or a logout is said plainly.
        fetch("/api/me", { credentials: "same-origin" }).then(function (r) {
          if (r.status === 401 || r.status === 403) { status("refused"); } else { retry(); }
        }, retry);
      };
    }
    function retry() {
      status("closed");
      setTimeout(open, delay);
      delay = Math.min(delay * 2, 10000);
    }
    open();
    return { close: function () { stopped = true; if (ws) ws.close(); }, socket: function () { return ws; } };
  }
  // A server timestamp (ISO 8601, UTC) as the pages render it: "2026-11-29 20:40:00".
  function formatTime(iso) { return String(iso).replace("T", " ").slice(0, 19); }
  return { connect: connect, formatTime: formatTime };
})();
