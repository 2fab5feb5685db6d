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
    return Math.abs(value) >= 100 ? value.toFixed(0) : value.toFixed(2);
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
            return level ? level.stats[key] * scale : null;
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
    const cells = [level.target, level.label].concat(columns.map(function (c) { return fmt(level.stats[c[0]]); }))
      .concat([pct(m.prefix_cache_hit_rate), fmt(m.preemptions), spec(m), roce(level.fabric),
               client.saturated ? "saturated: " + client.saturated_because : (100 * (client.cpu_share || 0)).toFixed(0) + "% CPU"]);
    for (const cell of cells) {
      const td = document.createElement("td");
      td.textContent = Array.isArray(cell) ? cell[0] : cell;
      if (Array.isArray(cell) && cell[1]) td.title = cell[1];
      tr.appendChild(td);
    }
    if (level.stats.failed) tr.classList.add("table-warning");
    if (client.saturated) tr.classList.add("table-danger");
    tbody.appendChild(tr);
  }

  function gatewayAdded() {
    const direct = {};
    for (const level of levels) if (level.target === "direct") direct[level.label] = level.stats;
    const body = document.querySelector("#gateway-added tbody");
    body.textContent = "";
    let any = false;
    for (const level of levels) {
      const base = direct[level.label];
      if (level.target !== "gateway" || !base) continue;
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
  data.levels.forEach(levelDone);
  const FINAL = ["succeeded", "failed", "cancelled", "timed_out", "lost"];
  if (FINAL.includes(data.state)) { if (data.state === "succeeded") setProgress(1); return; }

  PortalLive.connect("/ws/jobs/" + data.job + "/", function (message) {
    if (message.event === "benchmark.progress") {
      const d = message.data;
      const within = d.planned ? d.done / d.planned : 0;
      setProgress((d.position + within) / Math.max(1, d.levels));
    } else if (message.event === "benchmark.level") {
      levelDone(message.data);
    } else if (message.event === "job.state" && message.data.id === data.job) {
      const state = document.getElementById("run-state");
      state.textContent = message.data.state;
      state.dataset.state = message.data.state;
      if (message.data.state === "succeeded") setProgress(1);
      if (message.data.error) {
        const box = document.getElementById("run-error");
        box.textContent = message.data.error;
        box.hidden = false;
      }
    }
  });
})();
