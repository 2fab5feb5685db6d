"""A page's WebSockets as the browser test sees them: an init script (run before any page
script) that records every socket the page opens, whether it opened and closed, and the
messages of the sockets a test follows; it can also hold a socket's sends until the test
releases them, to order what the server sees against what the test does."""

from __future__ import annotations

import json
from typing import Any

_RECORDER = """
(() => {
  const RECORD = %(record)s, HOLD = %(hold)s;
  window.__sockets = [];
  const held = [];
  let released = false;
  window.__releaseSends = () => { released = true; for (const send of held.splice(0)) send(); };
  const Native = window.WebSocket;
  window.WebSocket = function (url, protocols) {
    const ws = protocols === undefined ? new Native(url) : new Native(url, protocols);
    const path = new URL(url).pathname;
    const seen = { path: path, opened: false, closed: false, messages: [], held: 0 };
    window.__sockets.push(seen);
    ws.addEventListener("open", () => { seen.opened = true; });
    ws.addEventListener("close", () => { seen.closed = true; });
    if (RECORD !== null && path.startsWith(RECORD)) {
      ws.addEventListener("message", (e) => { seen.messages.push(JSON.parse(e.data)); });
    }
    if (HOLD !== null && path.startsWith(HOLD)) {
      const send = ws.send.bind(ws);
      ws.send = (data) => {
        if (released) { send(data); return; }
        seen.held += 1;
        held.push(() => send(data));
      };
    }
    return ws;
  };
  window.WebSocket.prototype = Native.prototype;
  Object.assign(window.WebSocket, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
})();
"""


def socket_recorder(*, record: str | None = None, hold: str | None = None) -> str:
    """The init script: messages of sockets whose path starts with `record` are kept; sends
    on sockets whose path starts with `hold` wait for `window.__releaseSends()`."""
    return _RECORDER % {"record": json.dumps(record), "hold": json.dumps(hold)}


def sockets(page: Any, path: str) -> list[dict[str, Any]]:
    """What the recorder saw of the page's sockets to `path`, oldest first."""
    return [seen for seen in page.evaluate("window.__sockets") if seen["path"] == path]
