// Jobs list: rows change state live (job.state on the dashboard group); new jobs appear at
// the top of the first page when they match the filters.
(function () {
  const table = document.getElementById("job-table");
  if (!table) return;
  const filters = JSON.parse(document.getElementById("job-filter-values").textContent);
  function matches(job) {
    if (filters.kind && job.kind !== filters.kind) return false;
    if (filters.state && job.state !== filters.state) return false;
    if (filters.lane && job.lane !== filters.lane) return false;
    if (filters.node && !(job.nodes || []).includes(filters.node)) return false;
    return true;
  }
  function badge(state) { return '<span class="badge state state-' + state + '" data-state-badge>' + state + "</span>"; }
  function newRow(job) {
    const tr = document.createElement("tr");
    tr.id = "job-row-" + job.id;
    tr.dataset.job = job.id;
    const cells = ["", job.kind_label || job.kind, job.lane ? "lane " + job.lane : "node " + (job.nodes || []).join(", "), "",
                   job.created_by || "system", (job.created_at || "").replace("T", " ").slice(0, 19), "", ""];
    for (const text of cells) { const td = document.createElement("td"); td.textContent = text; tr.appendChild(td); }
    tr.children[0].innerHTML = '<a href="/jobs/' + job.id + '/">#' + job.id + "</a>";
    tr.children[6].dataset.duration = ""; tr.children[6].className = "text-nowrap"; tr.children[5].className = "text-nowrap"; tr.children[7].dataset.error = ""; tr.children[7].className = "small text-danger";
    return tr;
  }
  PortalLive.connect("/ws/dashboard/", function (msg) {
    if (msg.event !== "job.state") return;
    const job = msg.data;
    let tr = document.getElementById("job-row-" + job.id);
    if (!tr) {
      if (!table.dataset.live || !matches(job)) return;
      const tbody = table.querySelector("tbody");
      const empty = tbody.querySelector("tr.empty");
      if (empty) empty.remove();
      tr = newRow(job);
      tbody.insertBefore(tr, tbody.firstChild);
    }
    const cell = tr.children[3];
    const old = cell.querySelector("[data-state-badge]");
    if (old) old.outerHTML = badge(job.state); else cell.insertAdjacentHTML("afterbegin", badge(job.state));
    cell.classList.add("text-nowrap");
    const warnings = (job.warnings || []).length;
    let flag = cell.querySelector("[data-warnings]");
    if (warnings && (!flag || flag.hidden)) {
      if (!flag) { flag = document.createElement("span"); flag.dataset.warnings = ""; cell.append(" ", flag); }
      flag.className = "badge text-bg-warning";
      flag.hidden = false;
      flag.title = job.warnings.join("\n");
      flag.textContent = "⚠ " + warnings + " warning" + (warnings === 1 ? "" : "s");
    }
    tr.querySelector("[data-error]").textContent = (job.error || "").slice(0, 120);
    if (job.started_at && job.finished_at) {
      const s = (new Date(job.finished_at) - new Date(job.started_at)) / 1000;
      tr.querySelector("[data-duration]").textContent = s.toFixed(1) + " s";
    }
  });
})();
