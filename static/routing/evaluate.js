// Accuracy and lane share across thresholds, the published version's accuracy beside.
(function () {
  const node = document.getElementById("chart-data");
  const canvas = document.getElementById("threshold-chart");
  if (!node || !canvas || typeof Chart === "undefined") return;
  const data = JSON.parse(node.textContent);
  const palette = ["#0d6efd", "#fd7e14", "#20c997", "#6f42c1", "#d63384"];
  const datasets = [{ label: "accuracy", data: data.accuracy, borderColor: "#198754", borderWidth: 3, pointRadius: 0 }];
  Object.keys(data.shares).forEach(function (lane, i) {
    datasets.push({ label: "share → " + lane, data: data.shares[lane], borderColor: palette[i % palette.length], borderDash: [6, 3], pointRadius: 0 });
  });
  if (data.published) {
    datasets.push({ label: "published v" + data.published.number + " accuracy", data: data.published.accuracy, borderColor: "#adb5bd", pointRadius: 0 });
  }
  window.thresholdChart = new Chart(canvas, {
    type: "line",
    data: { labels: data.thresholds, datasets: datasets },
    options: {
      animation: false,
      scales: { y: { min: 0, max: 1 }, x: { title: { display: true, text: "threshold (this version: " + data.threshold + ")" } } },
      plugins: { legend: { position: "bottom" } },
    },
  });
})();
