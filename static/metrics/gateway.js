// The gateway page: its live figures and the traffic chart. The chart starts from the last
// hour the page came with and follows each tick (its last two minutes: the current minute
// updated in place, a new one appended); or shows a custom window (?from=…&to=…, UTC, from
// /api/gateway/traffic: fixed, per minute up to 6 h, per hour beyond). Markers: every lane's
// launches, stops, restarts, degraded and recovered, and alerts, fetched again when one
// happens (and on a reconnect).
(function () {
  const first = JSON.parse(document.getElementById("traffic-data").textContent);
  const canvas = document.getElementById("traffic");
  const chart = SparkMetrics.lineChart(canvas, ["requests", "errors", "max_latency_ms"], { max_latency_ms: "slowest request (ms)" });
  chart.data.datasets[2].yAxisID = "latency";
  chart.options.scales.latency = { position: "right", beginAtZero: true, grid: { drawOnChartArea: false },
                                   title: { display: true, text: "ms" } };
  chart.options.scales.y = { beginAtZero: true, title: { display: true, text: "requests/min" } };
  const fromInput = document.getElementById("range-from"), toInput = document.getElementById("range-to");
  const inputs = SparkMetrics.windowInputs(fromInput, toInput);
  const errorBox = document.getElementById("range-error"), title = document.getElementById("traffic-title");
  const query = new URLSearchParams(location.search);
  let custom = query.get("from") || query.get("to") ? { from: query.get("from") || "", to: query.get("to") || "" } : null;
  let bucketS = 60, times = [];
  const loads = SparkMetrics.latestLoad();
  const label = function (p) { return bucketS >= 3600 ? String(p.t).slice(5, 16).replace("T", " ") : SparkMetrics.clock(p.t).slice(0, 5); };
  const values = function (p) { return [p.requests, p.errors, p.max_latency_ms]; };
  function draw(body) {
    bucketS = body.bucket_s;
    times = body.points.map(function (p) { return Date.parse(p.t); });
    chart.data.labels = body.points.map(label);
    chart.data.datasets.forEach(function (ds, i) { ds.data = body.points.map(function (p) { return values(p)[i]; }); });
    chart.options.scales.y.title.text = bucketS >= 3600 ? "requests/hour" : "requests/min";
    SparkMetrics.setTimeline(chart, times, body.events);
    title.textContent = body.range === "custom"
      ? "Traffic, errors and the slowest request per " + (bucketS >= 3600 ? "hour" : "minute") + ", " + body.from.slice(0, 16).replace("T", " ") + " – " + body.to.slice(0, 16).replace("T", " ") + " UTC"
      : "Traffic, errors and the slowest request per minute, last hour (follows every scrape)";
    if (body.range !== "custom") { inputs.show(body.from, body.to); }
    document.querySelectorAll("#ranges button[data-range]").forEach(function (b) { b.classList.toggle("active", body.range !== "custom"); });
    canvas.dataset.events = String(body.events.length);
    canvas.dataset.loaded = body.range;
  }
  function showError(detail) {
    const e = Array.isArray(detail) ? detail[0] : { msg: detail, loc: [] };
    errorBox.textContent = e.msg || "The window was refused."; errorBox.hidden = false;
    fromInput.classList.toggle("is-invalid", (e.loc || [])[1] === "from");
    toInput.classList.toggle("is-invalid", (e.loc || [])[1] === "to");
  }
  function load(remember) {
    const mine = loads.begin(remember);
    const q = custom ? "?from=" + encodeURIComponent(custom.from) + "&to=" + encodeURIComponent(custom.to) : "";
    return fetch("/api/gateway/traffic" + q, { credentials: "same-origin" }).then(function (r) {
      return r.json().then(function (body) {
        const keepUrl = loads.settle(mine);
        if (keepUrl === null) return;  // a newer request is on its way
        if (!r.ok) { showError(body.detail); canvas.dataset.loaded = "error"; return; }
        errorBox.hidden = true; fromInput.classList.remove("is-invalid"); toInput.classList.remove("is-invalid");
        if (keepUrl) {  // the URL first: a page marked loaded already shows its window's address
          const keep = new URLSearchParams(location.search);
          keep.delete("from"); keep.delete("to");
          if (custom) { keep.set("from", custom.from); keep.set("to", custom.to); }
          history.replaceState(null, "", location.pathname + (keep.toString() ? "?" + keep : ""));
        }
        draw(body);
      });
    });
  }
  document.getElementById("range-custom").addEventListener("submit", function (e) {
    e.preventDefault(); custom = { from: fromInput.value, to: toInput.value }; load(true);
  });
  document.querySelector("#ranges button[data-range='1h']").addEventListener("click", function () { custom = null; inputs.presetChosen(); load(true); });
  if (custom) { fromInput.value = custom.from.slice(0, 16); toInput.value = custom.to.slice(0, 16); load(false); } else draw(first);
  function follow(points) {
    if (custom) return;  // a custom window is fixed
    (points || []).forEach(function (p) {
      const t = Date.parse(p.t);
      const at = times.indexOf(t);
      if (at >= 0) { chart.data.datasets.forEach(function (ds, i) { ds.data[at] = values(p)[i]; }); return; }
      if (times.length && t < times[times.length - 1]) { return; }
      times.push(t);
      chart.data.labels.push(label(p));
      chart.data.datasets.forEach(function (ds, i) { ds.data.push(values(p)[i]); });
      while (times.length > 60) { times.shift(); chart.data.labels.shift(); chart.data.datasets.forEach(function (ds) { ds.data.shift(); }); }
    });
    chart.update("none");
    canvas.dataset.ticks = String(Number(canvas.dataset.ticks || 0) + 1);
  }
  let refetch = null, opened = false;
  const MARKED = ["lane.state", "lane.guardian", "alert.changed"];
  PortalLive.connect("/ws/dashboard/", function (msg) {
    if (MARKED.includes(msg.event) || (msg.event === "job.state" && msg.data.lane)) {
      clearTimeout(refetch); refetch = setTimeout(function () { load(false); }, 300); return;
    }
    if (msg.event !== "metrics.tick" || !msg.data.gateway) { return; }
    const g = msg.data.gateway;
    follow(g.traffic);
    document.querySelectorAll("#gateway-live [data-figure]").forEach(function (el) { el.textContent = SparkMetrics.format(el.dataset.figure, g[el.dataset.figure]); });
    document.getElementById("live-share").textContent = Object.entries(g.share).map(function ([l, p]) { return `${l} ${p.toFixed(0)}%`; }).join(" ") || "—";
  }, function () {
    if (opened) load(false);  // a reconnect: what changed while the socket was down
    opened = true;
  });
})();
