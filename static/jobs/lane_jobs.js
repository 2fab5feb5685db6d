// Lane and node pages: the recent-jobs list under the action buttons follows job.state
// live, and the lane's state badge (and its replicas') follows lane.state (launch → starting → serving).
(function () {
  const lists = document.querySelectorAll("[data-recent-jobs]");
  if (!lists.length) return;
  function laneState(data) {
    const badge = document.getElementById("lane-state");
    if (!badge || badge.dataset.lane !== data.name) return;
    badge.className = "badge state state-" + data.observed_state;
    badge.textContent = data.observed_state;
    if (data.reason) badge.title = data.reason;
    const reason = document.getElementById("lane-state-reason");
    if (reason) reason.textContent = data.reason || "";
    const desired = document.getElementById("lane-desired");
    if (desired && data.desired_state) desired.textContent = data.desired_state;
    (data.replicas || []).forEach(function (r) {
      const row = document.querySelector('#lane-replicas tr[data-replica="' + r.index + '"]');
      if (!row) return;
      const replicaBadge = row.querySelector(".replica-state");
      replicaBadge.className = "badge state replica-state state-" + r.observed_state;
      replicaBadge.textContent = r.observed_state;
      row.querySelector(".replica-reason").textContent = r.reason || "";
    });
  }
  // The Guardian card follows lane.guardian (every guardian tick): the view the page rendered.
  function laneGuardian(data) {
    const card = document.getElementById("lane-guardian"), badge = document.getElementById("lane-state");
    if (!card || !badge || badge.dataset.lane !== data.name) return;
    (data.replicas || []).forEach(function (r) {
      const row = card.querySelector('tr.guardian-replica[data-replica="' + r.index + '"]');
      if (!row) return;
      row.querySelector(".last-progress").textContent = r.progress;
      row.children[2].textContent = r.running === null || r.running === undefined ? "—" : r.running;
      const canary = row.querySelector(".canary"), verdict = document.createElement("span");
      verdict.className = r.canary_ok === true ? "text-success" : "text-danger";
      verdict.textContent = r.canary_ok === true ? "ok" : (r.canary_ok === false ? "failed" : "");
      const when = document.createElement("span");
      when.className = "text-muted";
      when.textContent = r.canary_at;
      canary.replaceChildren(verdict, " " + r.canary + " ", when);
      if (r.error) {
        const error = document.createElement("div");
        error.className = "text-danger";
        error.textContent = r.error;
        canary.append(error);
      }
    });
    (data.nodes || []).forEach(function (n) {
      const span = card.querySelector('.node-memory[data-node="' + n.name + '"]');
      if (!span) return;
      const name = document.createElement("strong"), when = document.createElement("span");
      name.textContent = n.name;
      when.className = "text-muted";
      when.textContent = n.at;
      span.replaceChildren(name, n.available_gib === null ? " not read yet" :
        " " + n.available_gib.toFixed(1) + " GiB available ", n.available_gib === null ? "" : when);
    });
  }
  // Running rN against the latest rM: asked again whenever what runs may have changed.
  const driftBox = document.getElementById("lane-drift");
  async function refreshDrift() {
    if (!driftBox) return;
    const r = await fetch("/api/jobs/lanes/" + encodeURIComponent(driftBox.dataset.lane) + "/drift", { credentials: "same-origin" });
    if (!r.ok) return;
    showDrift(await r.json());
  }
  function showDrift(drift) {
    // Nothing running (mid-restart, stopped): no drift to state, never "running rnull".
    driftBox.hidden = !drift.drifted || drift.running === null;
    if (drift.running !== null) document.getElementById("drift-summary").textContent = "running r" + drift.running + ", latest r" + drift.latest;
    driftBox.querySelectorAll(".drift-latest").forEach(function (el) { el.textContent = drift.latest; });
    const list = document.getElementById("drift-changes");
    list.replaceChildren();
    drift.changes.forEach(function (c) {
      const li = document.createElement("li"), code = document.createElement("code");
      const del = document.createElement("del"), ins = document.createElement("ins");
      code.textContent = c.field;
      del.textContent = c.running === null ? "—" : (typeof c.running === "object" ? JSON.stringify(c.running) : c.running);
      ins.textContent = c.latest === null ? "—" : (typeof c.latest === "object" ? JSON.stringify(c.latest) : c.latest);
      li.append(code, ": ", del, " → ", ins);
      list.append(li);
    });
    const running = document.getElementById("lane-running");
    if (running) {
      running.hidden = drift.running === null;
      running.querySelector(".running-number").textContent = drift.running === null ? "" : drift.running;
    }
  }
  window.laneDrift = { refresh: refreshDrift };
  // The RDMA watchdog's line (average, context limit, last error): read again whenever the
  // lane's state changes (degraded, recovered) and on every (re)connect, so it never shows the
  // average and the context limit from before the header's "degraded".
  const watchdogLine = document.getElementById("lane-watchdog");
  async function refreshWatchdog() {
    if (!watchdogLine || !driftBox) return;
    const r = await fetch("/api/fabric/watchdogs/" + encodeURIComponent(driftBox.dataset.lane), { credentials: "same-origin" });
    if (!r.ok) return;
    const w = await r.json();
    const context = document.getElementById("watchdog-context");
    if (context) context.textContent = w.context_limit;
    const average = document.getElementById("watchdog-average");
    if (average) { average.hidden = w.average_us === null; average.querySelector(".value").textContent = w.average_us === null ? "" : w.average_us.toFixed(2); }
    const error = document.getElementById("watchdog-error");
    if (error) { error.hidden = !w.last_error; error.querySelector(".value").textContent = w.last_error; }
    watchdogLine.dataset.refreshed = String(Number(watchdogLine.dataset.refreshed || 0) + 1);
  }
  // The Fair queue card follows every metrics.tick: each replica's slots held, waiting by class, shed.
  function laneQueues(lanes) {
    const card = document.getElementById("lane-fair-queue"), badge = document.getElementById("lane-state");
    const queues = card && badge && lanes && lanes[badge.dataset.lane] ? lanes[badge.dataset.lane].fair : null;
    if (!queues) return;
    queues.forEach(function (q) {
      const row = card.querySelector('tr[data-fair-replica="' + q.replica + '"]');
      if (!row) return;
      if (q.state === null) {
        const down = document.createElement("td");
        down.colSpan = 3; down.className = "text-muted"; down.textContent = "Redis does not answer";
        row.replaceChildren(row.children[0], down);
        return;
      }
      const held = document.createElement("td"), waiting = document.createElement("td"), shed = document.createElement("td");
      held.className = "fair-held"; held.textContent = q.state.held + " / " + q.slots;
      waiting.className = "fair-waiting"; waiting.textContent = q.state.interactive + " / " + q.state.batch;
      shed.className = "fair-shed";
      if (q.state.shed) {
        const strong = document.createElement("strong");
        strong.className = "text-danger"; strong.textContent = q.state.shed;
        shed.append(strong);
      } else shed.textContent = "0";
      row.replaceChildren(row.children[0], held, waiting, shed);
    });
    card.dataset.ticks = String(Number(card.dataset.ticks || 0) + 1);
  }
  const FINAL = ["succeeded", "failed", "cancelled", "timed_out", "lost"];
  PortalLive.connect("/ws/dashboard/", function (msg) {
    if (msg.event === "lane.guardian") {
      laneGuardian(msg.data);
      return;
    }
    if (msg.event === "metrics.tick") {
      laneQueues(msg.data.lanes);
      if (window.PortalFairWaits) PortalFairWaits.render(document.getElementById("lane-fair-waits"), msg.data.fair_waits);
      return;
    }
    if (msg.event === "fair.waits") {  // per key: an operator's socket (and every socket's snapshot)
      if (window.PortalFairWaits) PortalFairWaits.render(document.getElementById("lane-fair-waits"), msg.data);
      return;
    }
    if (msg.event === "lane.state") {
      laneState(msg.data);
      if (driftBox && msg.data.name === driftBox.dataset.lane) { refreshDrift(); refreshWatchdog(); }
      return;
    }
    if (msg.event === "lane.drift" && driftBox && msg.data.name === driftBox.dataset.lane) {
      showDrift(msg.data);
      return;
    }
    if (msg.event === "lane.saved" && driftBox && msg.data.name === driftBox.dataset.lane) {
      const rev = document.getElementById("lane-revision");
      if (rev && Number(rev.textContent) < msg.data.revision) {
        rev.textContent = msg.data.revision;
        const notice = document.getElementById("lane-saved-notice");
        if (notice) {
          notice.querySelector(".saved-revision").textContent = "r" + msg.data.revision;
          notice.querySelector(".saved-by").textContent = msg.data.by ? " by " + msg.data.by : "";
          notice.hidden = false;
        }
      }
      refreshDrift();
      return;
    }
    if (msg.event !== "job.state") return;
    const job = msg.data;
    if (driftBox && job.lane === driftBox.dataset.lane && FINAL.includes(job.state)) refreshDrift();
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
