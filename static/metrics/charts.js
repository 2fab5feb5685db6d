// Lane and node charts: history from /api/metrics/series/ for the chosen range, then every
// metrics.tick appended in place (the chart is updated, the page never redrawn).
(function () {
  const box = document.getElementById("charts");
  const kind = box.dataset.kind, name = box.dataset.name;
  const labels = JSON.parse(document.getElementById("series-labels").textContent);
  const MAX_POINTS = { "15m": 180, "6h": 360, "7d": 168 };
  // 6 h and 7 days show one point a minute and an hour: a tick updates the current
  // bucket's point (a running mean), and starts a new point when a new bucket begins, so
  // the live end of the chart keeps the same time scale as its history.
  const BUCKET_S = { "15m": 0, "6h": 60, "7d": 3600 };
  let range = "15m";
  let lastBucket = null, inBucket = 0;
  const charts = Array.from(box.querySelectorAll("canvas")).map(function (canvas) {
    const series = canvas.dataset.series.split(",");
    return { series: series, chart: SparkMetrics.lineChart(canvas, series, labels) };
  });
  function label(iso) { return range === "7d" ? String(iso).slice(5, 16).replace("T", " ") : SparkMetrics.clock(iso); }
  function load() {
    fetch(`/api/metrics/series/${kind}/${encodeURIComponent(name)}?range=${range}`, { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (body) {
        charts.forEach(function (c) {
          c.chart.data.labels = body.points.map(function (p) { return label(p.t); });
          c.chart.data.datasets.forEach(function (ds, i) {
            ds.data = body.points.map(function (p) { const v = p.v[c.series[i]]; return v === undefined ? null : v; });
          });
          c.chart.update("none");
        });
        const last = body.points.length ? Date.parse(body.points[body.points.length - 1].t) : null;
        lastBucket = last; inBucket = last === null ? 0 : 1;
        box.dataset.loaded = range;
      });
  }
  document.querySelectorAll("#ranges button").forEach(function (button) {
    button.addEventListener("click", function () {
      document.querySelectorAll("#ranges button").forEach(function (b) { b.classList.toggle("active", b === button); });
      range = button.dataset.range; load();
    });
  });
  load();
  PortalLive.connect("/ws/dashboard/", function (msg) {
    if (msg.event !== "metrics.tick") { return; }
    const entry = (msg.data[kind + "s"] || {})[name];
    if (!entry) { return; }
    document.getElementById("last-tick").textContent = PortalLive.formatTime(msg.data.at);
    const badge = document.getElementById("target-state");
    badge.textContent = entry.state; badge.className = "badge state state-" + entry.state;
    document.getElementById("scrape-error").textContent = entry.scraped && entry.ok === false ? "scrape failed: " + entry.error : "";
    if (!entry.scraped || !entry.ok) { return; }
    const size = BUCKET_S[range];
    const bucket = size ? Math.floor(Date.parse(msg.data.at) / 1000 / size) * size * 1000 : null;
    if (size && bucket === lastBucket) {
      charts.forEach(function (c) {
        c.chart.data.datasets.forEach(function (ds, i) {
          const value = entry.figures[c.series[i]];
          if (value === undefined || !ds.data.length) { return; }
          const old = ds.data[ds.data.length - 1];
          ds.data[ds.data.length - 1] = old === null || old === undefined ? value : (old * inBucket + value) / (inBucket + 1);
        });
        c.chart.update("none");
      });
      inBucket += 1;
    } else {
      const at = size ? new Date(bucket).toISOString() : msg.data.at;
      charts.forEach(function (c) {
        SparkMetrics.push(c.chart, label(at), c.series.map(function (s) { return entry.figures[s]; }), MAX_POINTS[range]);
      });
      if (size) { lastBucket = bucket; inBucket = 1; }
    }
    box.dataset.ticks = String(Number(box.dataset.ticks || 0) + 1);
  });
})();
