// Two runs on one chart: decode tok/s and TTFT p50 per level, run a solid, run b dashed.
(function () {
  const el = document.getElementById("compare-data");
  if (!el) return;
  const runs = JSON.parse(el.textContent);
  const COLORS = { direct: "#0d6efd", gateway: "#fd7e14" };
  function draw(id, key, scale, title) {
    const labels = [];
    for (const run of [runs.a, runs.b]) for (const level of run.levels) if (!labels.includes(level.label)) labels.push(level.label);
    const datasets = [];
    for (const [name, run] of [["a", runs.a], ["b", runs.b]]) {
      const targets = [];
      for (const level of run.levels) if (!targets.includes(level.target)) targets.push(level.target);
      for (const target of targets) {
        datasets.push({
          label: name + " #" + run.job + " " + target, borderColor: COLORS[target], backgroundColor: COLORS[target],
          borderDash: name === "b" ? [6, 4] : [],
          data: labels.map(function (label) {
            const level = run.levels.find(function (l) { return l.target === target && l.label === label; });
            // a level where nothing succeeded has no figure to draw (its zeros are no measurement)
            return level && level.stats.completed ? level.stats[key] * scale : null;
          }),
        });
      }
    }
    return new Chart(document.getElementById(id), {
      type: "line", data: { labels: labels, datasets: datasets },
      options: { animation: false, plugins: { title: { display: true, text: title } }, scales: { y: { beginAtZero: true } } },
    });
  }
  window.compareCharts = {
    decode: draw("compare-decode", "median_decode_tok_s", 1, "Decode tok/s (p50)"),
    ttft: draw("compare-ttft", "median_ttft_ms", 0.001, "TTFT p50 (s)"),
  };
})();
