// Search and filters on a list page, in the browser (a cluster has a handful of nodes and
// lanes): a form[data-filter-table] names the table; its text box matches each row's
// data-search, each select matches the row's data-<name>. The values live in the URL
// (?q=&state=…) so a filtered list can be shared and survives a reload.
(function () {
  document.querySelectorAll("form[data-filter-table]").forEach(function (form) {
    const table = document.querySelector(form.dataset.filterTable);
    if (!table) return;
    const count = form.querySelector("[data-filter-count]");
    const fields = Array.from(form.querySelectorAll("input[name], select[name]"));
    const params = new URLSearchParams(location.search);
    fields.forEach(function (f) { if (params.has(f.name)) f.value = params.get(f.name); });
    function apply() {
      const rows = Array.from(table.tBodies[0].rows).filter(function (r) { return !r.classList.contains("empty") && !r.classList.contains("no-match"); });
      let shown = 0;
      const query = new URLSearchParams();
      fields.forEach(function (f) { if (f.value) query.set(f.name, f.value); });
      rows.forEach(function (row) {
        const ok = fields.every(function (f) {
          if (!f.value) return true;
          if (f.name === "q") return (row.dataset.search || row.textContent).toLowerCase().includes(f.value.toLowerCase().trim());
          return (row.dataset[f.name] || "").split(/\s+/).includes(f.value);  // one value or a list
        });
        row.hidden = !ok;
        if (ok) shown++;
      });
      let none = table.tBodies[0].querySelector("tr.no-match");
      if (!none) {
        none = table.tBodies[0].insertRow();
        none.className = "no-match text-muted";
        const cell = none.insertCell();
        cell.colSpan = table.tHead.rows[0].cells.length;
        cell.textContent = "Nothing matches these filters.";
      }
      none.hidden = shown > 0 || rows.length === 0;
      if (count) count.textContent = query.toString() ? shown + " of " + rows.length + " shown" : "";
      history.replaceState(null, "", query.toString() ? "?" + query : location.pathname);
    }
    form.addEventListener("input", apply);
    form.addEventListener("submit", function (e) { e.preventDefault(); apply(); });
    form.addEventListener("reset", function () { setTimeout(apply, 0); });
    window.tableFilter = window.tableFilter || {};
    window.tableFilter[form.dataset.filterTable] = apply;
    apply();
  });
})();
