// Benchmark run page: levels and charts from the saved run, then live over the job's socket
// (benchmark.progress while a level runs, benchmark.level when it ends, job.state at the end).
(function () {
  const data = JSON.parse(document.getElementById("bench-data").textContent);
  const columns = JSON.parse(document.getElementById("bench-columns").textContent);
  const bar = document.getElementById("bench-progress");
  const tbody = document.querySelector("#bench-levels tbody");
  const levels = [];
  const COLORS = { direct: "#0d6efd", gateway: "#fd7e14" };

  function fmt(value) {
    if (value === null || value === undefined) return "-";
    if (typeof value !== "number") return String(value);
    if (Number.isInteger(value)) return String(value);
    return Math.abs(value) >= 100 ? value.toFixed(0) : value.toFixed(2);
  }
  // A level where no request succeeded has no latency or speed: "-" and a gap in the
  // charts, never a 0 that reads as a measurement.
  const COUNTS = ["completed", "failed", "total"];
  function figure(level, key) {
    if (!level.stats.completed && !COUNTS.includes(key)) return null;
    return level.stats[key];
  }
  function pct(value) { return value === null || value === undefined ? "-" : (100 * value).toFixed(1) + "%"; }
  function spec(m) {
    if (m.spec_acceptance_rate === null || m.spec_acceptance_rate === undefined) return "-";
    return pct(m.spec_acceptance_rate) + " · len " + m.spec_mean_acceptance_length.toFixed(2);
  }
  function roce(fabric) {
    // Bytes sent over the level, all the lane's RoCE devices; per device in the cell's title.
    const keys = Object.keys(fabric || {});
    if (!keys.length) return ["-", ""];
    let total = 0;
    const lines = [];
    for (const key of keys.sort()) {
      total += fabric[key].tx_bytes;
      lines.push(key + ": tx " + (fabric[key].tx_bytes / 1e9).toFixed(3) + " GB, rx " +
                 (fabric[key].rx_bytes / 1e9).toFixed(3) + " GB");
    }
    return [(total / 1e9).toFixed(3) + " GB", lines.join("\n")];
  }

  function chart(id, title) {
    return new Chart(document.getElementById(id), {
      type: "line",
      data: { labels: [], datasets: [] },
      options: { animation: false, responsive: true, plugins: { legend: { position: "bottom" } },
                 scales: { y: { beginAtZero: true, title: { display: true, text: title } } } },
    });
  }
  const decodeChart = chart("chart-decode", "tok/s");
  const ttftChart = chart("chart-ttft", "s");
  window.benchCharts = { decode: decodeChart, ttft: ttftChart };

  function redrawCharts() {
    const labels = [];
    for (const level of levels) if (!labels.includes(level.label)) labels.push(level.label);
    const targets = [];
    for (const level of levels) if (!targets.includes(level.target)) targets.push(level.target);
    for (const [c, key, scale] of [[decodeChart, "median_decode_tok_s", 1], [ttftChart, "median_ttft_ms", 0.001]]) {
      c.data.labels = labels;
      c.data.datasets = targets.map(function (target) {
        return {
          label: target, borderColor: COLORS[target], backgroundColor: COLORS[target],
          data: labels.map(function (label) {
            const level = levels.find(function (l) { return l.target === target && l.label === label; });
            const value = level ? figure(level, key) : null;
            return value === null || value === undefined ? null : value * scale;
          }),
        };
      });
      c.update();
    }
  }

  function addRow(level) {
    const tr = document.createElement("tr");
    tr.dataset.position = level.position;
    const m = level.metrics || {};
    const client = level.stats.client || {};
    const cells = [level.target, level.label].concat(columns.map(function (c) {
      const value = fmt(figure(level, c[0]));
      if (value !== "-" && (level.thin || []).includes(c[0])) {  // a p95/p99 of a handful of requests
        return ["≈ " + value, c[0].split("_")[0] + " of " + level.stats.completed + " requests only: little more than the slowest of them"];
      }
      return c[0] === "failed" && level.stats.failed ? [value, (level.stats.errors || []).join("\n")] : value;
    }))
      .concat([pct(m.prefix_cache_hit_rate), fmt(m.preemptions), spec(m), roce(level.fabric),
               client.saturated ? "saturated: " + client.saturated_because : (100 * (client.cpu_share || 0)).toFixed(0) + "% CPU" +
               (client.host_busy_share !== undefined ? " · host " + (100 * client.host_busy_share).toFixed(0) + "% busy" : "")]);
    for (const cell of cells) {
      const td = document.createElement("td");
      td.textContent = Array.isArray(cell) ? cell[0] : cell;
      if (Array.isArray(cell) && cell[1]) td.title = cell[1];
      tr.appendChild(td);
    }
    if (level.stats.failed) tr.classList.add("table-warning");
    if (client.saturated) tr.classList.add("table-danger");
    tbody.appendChild(tr);
    const notes = levelNotes(level, tr.children.length);
    if (notes) tbody.appendChild(notes);
    if (level.stats.failed && (level.stats.errors || []).length) {
      // Failures are shown with their reasons, under the level they belong to.
      const errors = document.createElement("tr");
      errors.className = "level-errors";
      errors.dataset.position = level.position;
      const td = document.createElement("td");
      td.colSpan = tr.children.length;
      td.className = "small text-danger pt-0";
      td.textContent = level.stats.failed + " failed: " + level.stats.errors.join("; ");
      errors.appendChild(td);
      tbody.appendChild(errors);
    }
  }

  function levelNotes(level, width) {
    // An open-loop level's figures from its schedule, and every flag with its figures, under its row.
    const s = level.stats;
    const notes = [];
    if (s.achieved_request_rate !== undefined && s.completed && s.scheduled_request_rate) {
      notes.push("from the schedule: TTFT p50 " + fmt(s.median_ttft_from_schedule_ms) + " ms, p95 " +
                 fmt(s.p95_ttft_from_schedule_ms) + " ms, E2E p50 " + fmt(s.median_e2el_from_schedule_ms) +
                 " ms; sent " + fmt(s.achieved_request_rate) + " req/s (schedule " + fmt(s.scheduled_request_rate) +
                 "), dispatch delay p95 " + fmt(s.p95_dispatch_delay_ms) + " ms");
    }
    if (s.goodput_share !== undefined) {
      const bounds = [];
      if (s.slo && s.slo.ttft_ms !== null) bounds.push("TTFT ≤ " + fmt(s.slo.ttft_ms) + " ms");
      if (s.slo && s.slo.tpot_ms !== null) bounds.push("TPOT ≤ " + fmt(s.slo.tpot_ms) + " ms");
      notes.push("goodput " + fmt(100 * s.goodput_share) + "% (" + s.good_requests + " of " + s.total + " within " +
                 bounds.join(", ") + ")");
    }
    if (s.slices && s.slices.length) {
      // The slowest slice, the one an admin looks for in a replay.
      const worst = s.slices.reduce(function (a, b) { return b.p95_ttft_ms > a.p95_ttft_ms ? b : a; });
      notes.push(s.slices.length + " slices of " + fmt(s.slice_s) + " s; the slowest from " + fmt(worst.start_s) +
                 " s: TTFT p95 " + fmt(worst.p95_ttft_ms) + " ms over " + worst.requests + " requests");
    }
    for (const flag of s.flags || []) notes.push("flagged: " + flag);
    if (!notes.length) return null;
    const tr = document.createElement("tr");
    tr.className = "level-notes";
    tr.dataset.position = level.position;
    const td = document.createElement("td");
    td.colSpan = width;
    td.className = "small pt-0 " + ((s.flags || []).length ? "text-warning-emphasis" : "text-body-secondary");
    td.textContent = notes.join(" · ");
    tr.appendChild(td);
    return tr;
  }

  function gatewayAdded() {
    const direct = {};
    for (const level of levels) if (level.target === "direct") direct[level.label] = level.stats;
    const body = document.querySelector("#gateway-added tbody");
    body.textContent = "";
    let any = false;
    for (const level of levels) {
      const base = direct[level.label];
      if (level.target !== "gateway" || !base || !base.completed || !level.stats.completed) continue;
      any = true;
      const tr = document.createElement("tr");
      for (const text of [level.label, fmt(level.stats.median_ttft_ms - base.median_ttft_ms),
                          fmt(level.stats.p95_ttft_ms - base.p95_ttft_ms), fmt(level.stats.mean_tpot_ms - base.mean_tpot_ms)]) {
        const td = document.createElement("td"); td.textContent = text; tr.appendChild(td);
      }
      body.appendChild(tr);
    }
    document.getElementById("gateway-added-box").hidden = !any;
  }

  function setProgress(fraction) {
    const value = Math.max(0, Math.min(100, Math.round(100 * fraction)));
    bar.style.width = value + "%";
    bar.textContent = value + "%";
    bar.setAttribute("aria-valuenow", String(value));
  }
  function levelDone(level) {
    if (levels.some(function (l) { return l.position === level.position; })) return;
    levels.push(level);
    levels.sort(function (a, b) { return a.position - b.position; });
    tbody.textContent = "";
    levels.forEach(addRow);
    redrawCharts();
    gatewayAdded();
    setProgress(levels.length / Math.max(1, data.levels_planned));
  }
  const FINAL = ["succeeded", "failed", "cancelled", "timed_out", "lost"];
  function showState(state, error) {
    const box = document.getElementById("run-state");
    box.textContent = state;
    box.dataset.state = state;
    if (state === "succeeded") setProgress(1);
    if (FINAL.includes(state)) {
      const cancel = document.getElementById("cancel-form");
      if (cancel) cancel.remove();
    }
    if (error) {
      const banner = document.getElementById("run-error");
      banner.textContent = error;
      banner.hidden = false;
    }
  }
  data.levels.forEach(levelDone);
  if (FINAL.includes(data.state)) { if (data.state === "succeeded") setProgress(1); return; }

  // Cancel from this page and stay on it: the progress bar stops, the state says cancelled.
  const cancelForm = document.getElementById("cancel-form");
  if (cancelForm) {
    cancelForm.addEventListener("submit", function (event) {
      event.preventDefault();
      cancelForm.querySelector("button").disabled = true;
      fetch(cancelForm.action, { method: "POST", body: new FormData(cancelForm), credentials: "same-origin" });
    });
  }

  // What happened between the page's render and the socket's open (a level, the end of
  // the run) arrives by no event: read the run once at each (re)connect, then follow events.
  function catchUp() {
    fetch("/api/benchmarks/" + data.job, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (run) {
        if (!run) return;
        run.levels.forEach(levelDone);
        if (run.state !== "queued") showState(run.state, null);
      });
  }

  PortalLive.connect("/ws/jobs/" + data.job + "/", function (message) {
    if (message.event === "benchmark.progress") {
      const d = message.data;
      const within = d.planned ? d.done / d.planned : 0;
      setProgress((d.position + within) / Math.max(1, d.levels));
    } else if (message.event === "benchmark.level") {
      levelDone(message.data);
    } else if (message.event === "job.state" && message.data.id === data.job) {
      showState(message.data.state, message.data.error);
    }
  }, catchUp);
})();
