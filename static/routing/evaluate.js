// The evaluation page: its progress box follows the version's evaluation over the page's
// socket (a worker runs it: routing/evaluation_runs.py); once one is done the page fetches
// its own HTML and puts the new report in place, without a reload. Then the chart: accuracy
// and lane share across thresholds, the published version's accuracy beside.
(function () {
  function drawChart() {
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
    if (window.thresholdChart) window.thresholdChart.destroy();
    window.thresholdChart = new Chart(canvas, {
      type: "line",
      data: { labels: data.thresholds, datasets: datasets },
      options: {
        animation: false,
        scales: { y: { min: 0, max: 1 }, x: { title: { display: true, text: "threshold (this version: " + data.threshold + ")" } } },
        plugins: { legend: { position: "bottom" } },
      },
    });
  }

  const box = document.getElementById("evaluation-progress");
  function statusText(d) {
    if (d.state === "none") return "Not evaluated yet.";
    if (d.state === "failed") return "The last evaluation failed: " + d.error;
    if (d.state === "done") return "Evaluation #" + d.id + " done: showing its report.";
    let text = "Evaluation #" + d.id + " " + d.state + ": " + d.stage;
    if (d.total) text += " (" + d.done + " of " + d.total + ")";
    return text;
  }
  function showResult(id) {
    // The page's own HTML, now holding the stored report: only the result part changes.
    fetch(location.href, { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (html) {
      const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("evaluation-result");
      const current = document.getElementById("evaluation-result");
      if (!fresh || !current) return;
      current.replaceWith(fresh);
      box.dataset.shown = String(id);
      drawChart();
    });
  }
  function update(d) {
    const running = d.state === "queued" || d.state === "running";
    box.dataset.state = d.state;
    document.getElementById("evaluation-status").textContent = statusText(d);
    const bar = document.getElementById("evaluation-bar");
    bar.hidden = !running;
    bar.setAttribute("aria-valuemax", String(d.total));
    bar.setAttribute("aria-valuenow", String(d.done));
    bar.firstElementChild.style.width = (d.total ? Math.round(100 * d.done / d.total) : 0) + "%";
    const button = document.getElementById("evaluate-run");
    if (button) button.disabled = running;
    if (d.state === "done" && String(d.id) !== box.dataset.shown) showResult(d.id);
  }
  if (box && window.PortalLive) {
    PortalLive.connect("/ws/routing/versions/" + box.dataset.version + "/evaluation/", function (msg) {
      if (msg.event === "evaluation.progress") update(msg.data);
    });
  }
  drawChart();
})();
