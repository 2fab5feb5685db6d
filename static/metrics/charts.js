// Lane and node charts: history from /api/metrics/series/ for a preset range or a custom
// window (kept in the URL: ?range=6h, or ?from=…&to=…, UTC), then every metrics.tick appended
// in place while the window ends now (the chart is updated, the page never redrawn). The same
// answer carries the window's events, drawn as markers; a lane's state change, job or alert
// on the socket fetches them again, so a new event appears without a reload.
(function () {
  const box = document.getElementById("charts");
  const kind = box.dataset.kind, name = box.dataset.name;
  const labels = JSON.parse(document.getElementById("series-labels").textContent);
  const MAX_POINTS = { "15m": 180, "6h": 360, "7d": 168 };
  const fromInput = document.getElementById("range-from"), toInput = document.getElementById("range-to");
  const errorBox = document.getElementById("range-error");
  const inputs = SparkMetrics.windowInputs(fromInput, toInput);
  const query = new URLSearchParams(location.search);
  let range = query.get("from") || query.get("to") ? "custom" : (MAX_POINTS[query.get("range")] ? query.get("range") : "15m");
  let custom = range === "custom" ? { from: query.get("from") || "", to: query.get("to") || "" } : null;
  // 6 h and 7 days show one point a minute and an hour: a tick updates the current
  // bucket's point (a running mean), and starts a new point when a new bucket begins, so
  // the live end of the chart keeps the same time scale as its history. The server says
  // the bucket (bucket_s) of what it sent.
  let bucketS = 0, lastBucket = null, inBucket = 0;
  const loads = SparkMetrics.latestLoad();
  // The last ticks seen: a history fetched while ticks arrive (a live event's refetch) holds
  // the samples stored when the server read it, so the ticks it lacks are put back onto it once
  // drawn, and a tick it already holds is not drawn twice.
  const RECENT_TICKS = 30;
  const recent = [];
  const charts = Array.from(box.querySelectorAll("canvas")).map(function (canvas) {
    const series = canvas.dataset.series.split(",");
    return { series: series, chart: SparkMetrics.lineChart(canvas, series, labels) };
  });
  function label(iso) { return bucketS >= 3600 ? String(iso).slice(5, 16).replace("T", " ") : SparkMetrics.clock(iso); }
  function url() {
    const q = range === "custom" ? "from=" + encodeURIComponent(custom.from) + "&to=" + encodeURIComponent(custom.to) : "range=" + range;
    return `/api/metrics/series/${kind}/${encodeURIComponent(name)}?${q}`;
  }
  function markActive() {
    document.querySelectorAll("#ranges button[data-range]").forEach(function (b) { b.classList.toggle("active", b.dataset.range === range); });
  }
  function showError(detail) {
    const first = Array.isArray(detail) ? detail[0] : { msg: detail, loc: [] };
    errorBox.textContent = first.msg || "The window was refused.";
    errorBox.hidden = false;
    const field = (first.loc || [])[1];
    fromInput.classList.toggle("is-invalid", field === "from");
    toInput.classList.toggle("is-invalid", field === "to");
  }
  function clearError() { errorBox.hidden = true; errorBox.textContent = ""; fromInput.classList.remove("is-invalid"); toInput.classList.remove("is-invalid"); }
  function draw(body) {
    bucketS = body.bucket_s;
    const times = body.points.map(function (p) { return Date.parse(p.t); });
    charts.forEach(function (c) {
      c.chart.data.labels = body.points.map(function (p) { return label(p.t); });
      c.chart.data.datasets.forEach(function (ds, i) {
        ds.data = body.points.map(function (p) { const v = p.v[c.series[i]]; return v === undefined ? null : v; });
      });
      SparkMetrics.setTimeline(c.chart, times.slice(), body.events);
    });
    const last = times.length ? times[times.length - 1] : null;
    lastBucket = last; inBucket = last === null ? 0 : 1;
    if (range !== "custom") {
      inputs.show(body.from, body.to);
      const until = Date.parse(body.to);  // raw points: each tick after the last drawn; means: each after the read
      recent.forEach(function (r) { if (!bucketS || Date.parse(r.at) > until) follow(r.entry, r.at); });
    }
    box.dataset.events = String(body.events.length);
    box.dataset.loaded = range;
  }
  function load(remember) {
    const mine = loads.begin(remember);
    return fetch(url(), { credentials: "same-origin" }).then(function (r) {
      return r.json().then(function (body) {
        const keep = loads.settle(mine);
        if (keep === null) return;  // a newer request is on its way
        if (!r.ok) { showError(body.detail); box.dataset.loaded = "error"; return; }
        clearError();
        if (keep) {  // the URL first: a page marked loaded already shows its window's address
          const q = range === "custom" ? "?from=" + encodeURIComponent(custom.from) + "&to=" + encodeURIComponent(custom.to) : (range === "15m" ? "" : "?range=" + range);
          history.replaceState(null, "", location.pathname + q);
        }
        draw(body);
      });
    });
  }
  document.querySelectorAll("#ranges button[data-range]").forEach(function (button) {
    button.addEventListener("click", function () { range = button.dataset.range; custom = null; inputs.presetChosen(); markActive(); load(true); });
  });
  document.getElementById("range-custom").addEventListener("submit", function (e) {
    e.preventDefault();
    range = "custom"; custom = { from: fromInput.value, to: toInput.value }; markActive(); load(true);
  });
  if (custom) { fromInput.value = custom.from.slice(0, 16); toInput.value = custom.to.slice(0, 16); }
  markActive();
  load(false);
  let refetch = null;
  function eventsChanged() { clearTimeout(refetch); refetch = setTimeout(function () { load(false); }, 300); }
  function concernsMe(msg) {
    const d = msg.data || {};
    if (msg.event === "alert.changed") return d.kind === kind && d.target === name;
    if (kind !== "lane") return false;
    if (msg.event === "lane.state" || msg.event === "lane.guardian") return d.name === name;
    return msg.event === "job.state" && d.lane === name;
  }
  let opened = false;
  PortalLive.connect("/ws/dashboard/", function (msg) {
    if (concernsMe(msg)) { eventsChanged(); return; }
    if (msg.event !== "metrics.tick") { return; }
    const entry = (msg.data[kind + "s"] || {})[name];
    if (!entry) { return; }
    document.getElementById("last-tick").textContent = PortalLive.formatTime(msg.data.at);
    const badge = document.getElementById("target-state");
    badge.textContent = entry.state; badge.className = "badge state state-" + entry.state;
    document.getElementById("scrape-error").textContent = entry.scraped && entry.ok === false ? "scrape failed: " + entry.error : "";
    if (!entry.scraped || !entry.ok) { return; }
    recent.push({ entry: entry, at: msg.data.at });
    if (recent.length > RECENT_TICKS) recent.shift();
    if (range === "custom") { return; }  // a custom window is fixed: it does not follow
    follow(entry, msg.data.at);
    box.dataset.ticks = String(Number(box.dataset.ticks || 0) + 1);  // followed: drawn now, or held by the history drawn
  }, function () {
    if (opened) load(false);  // a reconnect: what changed while the socket was down
    opened = true;
  });
  // One tick onto the charts, unless the drawn history already holds it.
  function follow(entry, at) {
    const size = bucketS;
    if (!size && lastBucket !== null && Date.parse(at) <= lastBucket) { return; }
    const bucket = size ? Math.floor(Date.parse(at) / 1000 / size) * size * 1000 : null;
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
      const start = size ? new Date(bucket).toISOString() : at;
      charts.forEach(function (c) {
        SparkMetrics.push(c.chart, label(start), c.series.map(function (s) { return entry.figures[s]; }), MAX_POINTS[range], Date.parse(start));
      });
      lastBucket = size ? bucket : Date.parse(at);
      if (size) { inBucket = 1; }
    }
  }
})();
