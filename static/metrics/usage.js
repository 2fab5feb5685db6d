// The usage page's charts: drawn from the page's data (metrics.usage.usage_series), then
// read again from /api/usage/series on the dashboard socket's metrics.tick (the rollup the
// charts read moves on each minute), so new traffic shows without a reload.
(function () {
  const box = document.getElementById("usage-charts");
  const COLORS = ["#0d6efd", "#dc3545", "#198754", "#fd7e14", "#6f42c1", "#20c997", "#6c757d", "#d63384"];
  const MEASURES = {
    requests: [["requests", []]],
    tokens: [["prompt_tokens", []], ["completion_tokens", [5, 4]]],
    latency: [["latency_p50_ms", []], ["latency_p95_ms", [5, 4]]],
    cost: [["cost", []]],
  };
  const charts = {};
  box.querySelectorAll("canvas").forEach(function (canvas) {
    charts[canvas.dataset.measure] = new Chart(canvas, {
      type: "line", data: { labels: [], datasets: [] },
      options: { animation: false, maintainAspectRatio: false, interaction: { mode: "index", intersect: false },
                 scales: { x: { ticks: { maxTicksLimit: 8 } }, y: { beginAtZero: true } } },
    });
  });
  function label(iso, bucket) { return bucket === "day" ? String(iso).slice(0, 10) : String(iso).slice(5, 16).replace("T", " "); }
  function draw(body) {
    const labels = body.times.map(function (t) { return label(t, body.bucket); });
    Object.entries(charts).forEach(function ([measure, chart]) {
      chart.data.labels = labels;
      chart.data.datasets = [];
      body.series.slice(0, COLORS.length).forEach(function (s, i) {
        MEASURES[measure].forEach(function ([field, dash]) {
          chart.data.datasets.push({ label: s.name + (MEASURES[measure].length > 1 ? " " + field.replace(/_/g, " ") : ""),
                                     data: s[field], borderColor: COLORS[i], borderDash: dash, borderWidth: 1.5,
                                     pointRadius: 0, fill: false, spanGaps: true });
        });
      });
      chart.update("none");
    });
    const rows = document.querySelector("#usage-top tbody");
    rows.replaceChildren();
    body.top.forEach(function (row) {
      const tr = document.createElement("tr");
      const ms = function (v) { return v === null ? "—" : v.toFixed(0); };
      [row.name, row.requests, row.errors, row.prompt_tokens, row.completion_tokens,
       ms(row.latency_p50_ms) + " / " + ms(row.latency_p95_ms) + " ms", row.cost.toFixed(4),
       row.cost_per_request === null ? "—" : row.cost_per_request.toFixed(5)].forEach(function (value) {
        const td = document.createElement("td"); td.textContent = String(value); tr.appendChild(td);
      });
      rows.appendChild(tr);
    });
    box.dataset.requests = String(body.top.reduce(function (n, row) { return n + row.requests; }, 0));
  }
  draw(JSON.parse(document.getElementById("usage-data").textContent));
  // Ticks come every few seconds and the rollup moves each minute: one read per 15 s at most
  // (the first tick's always), never two at once.
  const EVERY_MS = 15000;
  let busy = false, last = 0;
  PortalLive.connect("/ws/dashboard/", function (msg) {
    if (msg.event !== "metrics.tick" || busy || Date.now() - last < EVERY_MS) { return; }
    busy = true; last = Date.now();
    fetch("/api/usage/series?" + box.dataset.query, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) { if (body) { draw(body); box.dataset.ticks = String(Number(box.dataset.ticks || 0) + 1); } })
      .finally(function () { busy = false; });
  });
})();
