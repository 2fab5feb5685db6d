// The fair queues' wait table (gateway.fair_view.fair_waits_live), live on the gateway page
// and the lane page: `render(table, data)` rewrites its rows from a `fair.waits` event (per
// key and class: operators only) or a metrics.tick's `fair_waits` (per class: everyone). The
// table says what it shows: data-lane (that lane's rows only; empty: every lane), a th.fair-lane
// header (a Lane column) and a th.fair-key header (rows per key: it takes only those).
window.PortalFairWaits = (function () {
  function ms(value) { return value === null ? "—" : Math.round(value) + " ms"; }
  function cell(text, className) {
    const td = document.createElement("td");
    if (className) td.className = className;
    td.textContent = text;
    return td;
  }
  function render(table, data) {
    if (!table || !data || !Array.isArray(data.rows)) return;
    const showLane = Boolean(table.querySelector("th.fair-lane")), byKey = Boolean(table.querySelector("th.fair-key"));
    if (Boolean(data.by_key) !== byKey) return;
    const lane = table.dataset.lane || "";
    const rows = data.rows.filter(function (w) { return !lane || w.lane === lane; });
    const body = table.tBodies[0];
    const columns = table.tHead.rows[0].cells.length;
    body.replaceChildren(...rows.map(function (w) {
      const tr = document.createElement("tr");
      tr.dataset.lane = w.lane; tr.dataset.key = w.key; tr.dataset.priority = w.priority;
      if (showLane) tr.append(cell(w.lane));
      if (byKey) tr.append(cell(w.key || "—", "text-break"));
      tr.append(cell(w.priority), cell(String(w.queued)), cell(ms(w.wait_p50_ms)), cell(ms(w.wait_p95_ms)));
      const shed = cell(w.shed ? "" : "0", "fair-shed");
      if (w.shed) {
        const strong = document.createElement("strong");
        strong.className = "text-danger"; strong.textContent = String(w.shed);
        shed.append(strong);
      }
      tr.append(shed);
      return tr;
    }));
    if (!rows.length) {
      const tr = document.createElement("tr"), td = cell("No request waited for a lane in the window.", "text-muted");
      td.colSpan = columns;
      tr.append(td);
      body.append(tr);
    }
    table.dataset.updates = String(Number(table.dataset.updates || 0) + 1);
  }
  return { render: render };
})();
