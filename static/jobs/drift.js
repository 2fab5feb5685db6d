// A lane's revision drift in a list row ("running r1, latest r2"), from lane.drift: sent when
// a launch, restart, stop or status job ends and in every (re)connect's snapshot, so a list
// never keeps a drift a restart has cleared. `withLatest`: the lanes list says both numbers.
window.LaneDrift = (function () {
  function show(cell, drift, withLatest) {
    if (!cell) return;
    let badge = cell.querySelector("[data-drift]");
    if (!drift.drifted || drift.running === null) { if (badge) badge.remove(); return; }
    if (!badge) {
      badge = document.createElement("span");
      badge.className = "badge text-bg-warning";
      badge.dataset.drift = "";
      badge.title = "saved changes apply at the next restart";
      cell.append(" ", badge);
    }
    badge.textContent = "running r" + drift.running + (withLatest ? ", latest r" + drift.latest : "");
  }
  return { show: show };
})();
