// Lane and node pages: the recent-jobs list under the action buttons follows job.state
// live, and the lane's state badge follows lane.state (launch → starting → serving).
(function () {
  const lists = document.querySelectorAll("[data-recent-jobs]");
  if (!lists.length) return;
  function laneState(data) {
    const badge = document.getElementById("lane-state");
    if (!badge || badge.dataset.lane !== data.name) return;
    badge.className = "badge state state-" + data.observed_state;
    badge.textContent = data.observed_state;
    if (data.reason) badge.title = data.reason;
    const desired = document.getElementById("lane-desired");
    if (desired && data.desired_state) desired.textContent = data.desired_state;
  }
  PortalLive.connect("/ws/dashboard/", function (msg) {
    if (msg.event === "lane.state") { laneState(msg.data); return; }
    if (msg.event !== "job.state") return;
    const job = msg.data;
    lists.forEach(function (list) {
      const lane = list.dataset.lane, node = list.dataset.node;
      if (lane && job.lane !== lane) return;
      if (node && !(job.nodes || []).includes(node)) return;
      let li = list.querySelector('[data-job="' + job.id + '"]');
      if (!li) {
        li = document.createElement("li");
        li.dataset.job = job.id;
        li.innerHTML = '<a></a> <span></span>';
        li.firstChild.href = "/jobs/" + job.id + "/";
        li.firstChild.textContent = "#" + job.id + " " + (job.kind_label || job.kind);
        const empty = list.querySelector(".empty");
        if (empty) empty.remove();
        list.insertBefore(li, list.firstChild);
      }
      li.lastChild.className = "badge state state-" + job.state;
      li.lastChild.textContent = job.state;
    });
  });
})();
