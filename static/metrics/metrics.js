// Live metrics on every page that shows them: cards, sparklines and charts follow the
// dashboard socket's metrics.tick and alert.changed events (Chart.js, served by the portal).
window.SparkMetrics = (function () {
  const UNITS = {
    gen_tps: [1, " tok/s"], prompt_tps: [0, " tok/s"], running: [0, ""], waiting: [0, ""], kv_pct: [0, "%"],
    prefix_hit_pct: [0, "%"], ttft_p50_ms: [0, " ms"], ttft_p95_ms: [0, " ms"], itl_p50_ms: [1, " ms"],
    itl_p95_ms: [1, " ms"], spec_accept_pct: [0, "%"], spec_accept_len: [2, ""], mem_avail_gib: [1, " GiB"],
    swap_used_gib: [2, " GiB"], cpu_pct: [0, "%"], gpu_util_pct: [0, "%"], gpu_power_w: [1, " W"],
    gpu_temp_c: [0, " °C"], rpm: [1, "/min"], error_pct: [1, "%"], latency_p50_ms: [0, " ms"],
    latency_p95_ms: [0, " ms"],
  };
  function bytesPerSecond(v) {
    const units = ["B/s", "KB/s", "MB/s", "GB/s"];
    let i = 0;
    while (v >= 1000 && i < units.length - 1) { v /= 1000; i++; }
    return v.toFixed(i ? 1 : 0) + " " + units[i];
  }
  function format(series, value) {
    if (value === null || value === undefined) { return "—"; }
    if (series.startsWith("roce_")) { return bytesPerSecond(value); }
    const unit = UNITS[series] || [1, ""];
    return Number(value).toFixed(unit[0]) + unit[1];
  }
  function clock(iso) { return String(iso).slice(11, 19); }
  const COLORS = ["#0d6efd", "#dc3545", "#198754", "#fd7e14"];

  function sparkline(canvas, points) {
    return new Chart(canvas, {
      type: "line",
      data: { labels: points.map(function (p) { return clock(p[0]); }),
              datasets: [{ data: points.map(function (p) { return p[1]; }), borderColor: "#0d6efd", borderWidth: 1.5,
                           pointRadius: 0, fill: false, tension: 0.2 }] },
      options: { animation: false, responsive: false, plugins: { legend: { display: false }, tooltip: { enabled: false } },
                 scales: { x: { display: false }, y: { display: false } } },
    });
  }
  // t: the new point's instant (ms), kept beside the labels for the markers.
  function push(chart, label, values, maxPoints, t) {
    chart.data.labels.push(label);
    chart.data.datasets.forEach(function (ds, i) { ds.data.push(values[i] === undefined ? null : values[i]); });
    if (chart.$times && t !== undefined) chart.$times.push(t);
    while (chart.data.labels.length > maxPoints) {
      chart.data.labels.shift();
      chart.data.datasets.forEach(function (ds) { ds.data.shift(); });
      if (chart.$times) chart.$times.shift();
    }
    chart.update("none");
  }
  // Annotations, as Grafana draws them: a vertical marker at each event's instant (launch,
  // stop, restart, degraded, recovered, alert, resolved), its label as the tooltip; a click
  // (or a tap on a phone) writes the label into the page's [data-marker-detail] line.
  const MARKER_TYPES = { launch: "launch", stop: "stop", restart: "restart", guardian_restart: "guardian restart",
                         degraded: "degraded", recovered: "recovered", alert: "alert", resolved: "resolved" };
  function pixelAt(chart, t) {
    const times = chart.$times || [], x = chart.scales.x;
    if (!times.length) return null;
    // The axis has a slot per point: an event of the window before the first point (or after
    // the last) is drawn at that end, its tooltip giving its own time.
    if (t <= times[0]) return x.getPixelForValue(0);
    let i = times.length - 1;
    if (t >= times[i]) return times.length === 1 ? x.getPixelForValue(0) : Math.min(x.getPixelForValue(i), chart.chartArea.right);
    let lo = 0;
    while (lo < i - 1) { const mid = (lo + i) >> 1; if (times[mid] <= t) lo = mid; else i = mid; }
    const a = x.getPixelForValue(lo), b = x.getPixelForValue(lo + 1);
    return a + (b - a) * Math.max(0, (t - times[lo]) / (times[lo + 1] - times[lo]));
  }
  function drawMarkers(chart) {
    const layer = chart.$markerLayer;
    if (!layer || !chart.chartArea) return;
    const area = chart.chartArea;
    const placed = (chart.$events || []).map(function (e) { return [e, pixelAt(chart, Date.parse(e.t))]; })
      .filter(function (p) { return p[1] !== null; });
    const key = placed.map(function (p) { return p[0].t + p[0].type + Math.round(p[1]); }).join("|") + "@" + area.top + "," + area.bottom;
    if (key === layer.dataset.key) return;  // unchanged (a tooltip redraw): keep the nodes the pointer is on
    layer.dataset.key = key;
    layer.replaceChildren(...placed.map(function (p) {
      const e = p[0], m = document.createElement("button");
      m.type = "button";
      m.className = "chart-marker marker-" + e.type;
      m.dataset.type = e.type;
      m.dataset.t = e.t;
      m.title = e.t.slice(0, 19).replace("T", " ") + " UTC · " + e.label;
      m.setAttribute("aria-label", (MARKER_TYPES[e.type] || e.type) + ": " + e.label);
      m.style.left = (p[1] - 4) + "px";
      m.style.top = area.top + "px";
      m.style.height = (area.bottom - area.top) + "px";
      m.addEventListener("click", function () {
        document.querySelectorAll("[data-marker-detail]").forEach(function (el) {
          el.replaceChildren(m.title + " ");
          if (e.href) { const a = document.createElement("a"); a.href = e.href; a.textContent = "open"; el.append(a); }
        });
      });
      return m;
    }));
  }
  const markerPlugin = { id: "portalMarkers", afterRender: drawMarkers };
  // The chart's point instants (ms, one per label) and its events; markers drawn over it.
  function setTimeline(chart, times, events) {
    if (!chart.$markerLayer) {
      const layer = document.createElement("div");
      layer.className = "chart-markers";
      chart.canvas.parentNode.style.position = "relative";
      chart.canvas.parentNode.appendChild(layer);
      chart.$markerLayer = layer;
    }
    chart.$times = times;
    if (events !== undefined) chart.$events = events;
    chart.update("none");
  }
  function lineChart(canvas, series, labels) {
    return new Chart(canvas, {
      type: "line",
      data: { labels: [], datasets: series.map(function (s, i) {
        return { label: labels[s] || s, data: [], borderColor: COLORS[i % COLORS.length], borderWidth: 1.5,
                 pointRadius: 0, fill: false, spanGaps: true };
      }) },
      options: { animation: false, maintainAspectRatio: false, interaction: { mode: "index", intersect: false },
                 scales: { x: { ticks: { maxTicksLimit: 8 } } } },
      plugins: [markerPlugin],
    });
  }
  // An engine percentile (ttft_/itl_/e2e_ p50 or p95) is an estimate from vLLM's buckets:
  // shown with its sample count, as the gateway's figures are, and the bucket its p95 lies in
  // (the figure's resolution); past the last finite bucket it is "≥" that bound.
  function figureText(series, figures) {
    const match = /^(ttft|itl|e2e)_(p50|p95)_ms$/.exec(series);
    const text = format(series, figures[series]);
    if (!match || figures[series] === undefined || figures[series] === null || figures[match[1] + "_n"] === undefined) {
      return text;
    }
    const prefix = match[1];
    const open = match[2] === "p95" ? figures[prefix + "_p95_hi_ms"] === undefined : figures[prefix + "_p50_ge"] === 1;
    let note = "n = " + Math.round(figures[prefix + "_n"]);
    if (match[2] === "p95") {
      const lo = format(series, figures[prefix + "_p95_lo_ms"]);
      note += open ? "; past the last bucket, " + lo : "; bucket " + lo.replace(/ ms$/, "") + "–" + format(series, figures[prefix + "_p95_hi_ms"]);
    }
    return (open ? "≥ " : "") + text + " (" + note + ")";
  }
  // Cards: every [data-figure] element inside a card shows one series of that target.
  function updateCard(card, entry) {
    if (!card || !entry) { return; }
    const figures = entry.figures || {};
    card.querySelectorAll("[data-figure]").forEach(function (el) {
      el.textContent = figureText(el.dataset.figure, figures);
    });
    const badge = card.querySelector(".state");
    if (badge && entry.state) { badge.textContent = entry.state; badge.className = "badge state state-" + entry.state; }
    const problem = card.querySelector(".scrape-error");
    if (problem) { problem.textContent = entry.scraped && entry.ok === false ? "scrape failed: " + entry.error : ""; }
  }
  // A chart page's custom-window inputs: they show the window drawn (a preset's from and to)
  // until the user types in them, so a live refetch's draw never overwrites what is being
  // typed; choosing a preset range hands them back to the drawn window.
  function windowInputs(fromInput, toInput) {
    let edited = false;
    [fromInput, toInput].forEach(function (input) { input.addEventListener("input", function () { edited = true; }); });
    return {
      show: function (from, to) { if (!edited) { fromInput.value = from.slice(0, 16); toInput.value = to.slice(0, 16); } },
      presetChosen: function () { edited = false; },
    };
  }
  // A chart page's history requests: only the newest one's answer is drawn, and a window the
  // user chose (remember) is kept in the URL once it loads, even when a live event's refetch
  // (which remembers nothing itself) overtakes its request. begin() before each fetch;
  // settle(its id) once answered: null when a newer request is on its way, else whether to
  // write the URL.
  function latestLoad() {
    let generation = 0, remembering = false;
    return {
      begin: function (remember) { if (remember) remembering = true; return ++generation; },
      settle: function (id) {
        if (id !== generation) return null;
        const keepUrl = remembering;
        remembering = false;
        return keepUrl;
      },
    };
  }
  return { format: format, figureText: figureText, windowInputs: windowInputs, latestLoad: latestLoad, clock: clock, sparkline: sparkline, push: push, lineChart: lineChart,
           updateCard: updateCard, setTimeline: setTimeline };
})();
