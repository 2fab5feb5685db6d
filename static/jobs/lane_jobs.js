// Lane and node pages: the recent-jobs list under the action buttons follows job.state live.
(function () {
  const lists = document.querySelectorAll("[data-recent-jobs]");
  if (!lists.length) return;
  PortalLive.connect("/ws/dashboard/", function (msg) {
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
        li.firstChild.textContent = "#" + job.id + " " + job.kind;
        const empty = list.querySelector(".empty");
        if (empty) empty.remove();
        list.insertBefore(li, list.firstChild);
      }
      li.lastChild.className = "badge state state-" + job.state;
      li.lastChild.textContent = job.state;
    });
  });
})();
