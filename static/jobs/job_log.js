// Job page: the tail comes from the API, then the socket follows. Lines carry seq: after a
// reconnect the page sends the last seq it has and the server replays exactly what is
// missing. The DOM holds a window of lines (never 100,000 nodes); earlier lines load on
// demand and the whole log downloads as text.
(function () {
  const view = document.getElementById("job-log");
  if (!view) return;
  const jobId = view.dataset.job;
  const WINDOW = 2000;       // lines kept in the DOM while following
  const PAGE = 1000;         // lines per fetch
  const follow = document.getElementById("log-follow");
  const earlierBtn = document.getElementById("log-earlier");
  const countEl = document.getElementById("log-count");
  let lastSeq = 0;           // highest seq shown
  let firstSeq = null;       // lowest seq in the DOM
  let jobFirstSeq = 0;       // the job's first line
  let pending = [];
  let scheduled = false;
  const filter = LogFilter.create(view, document.getElementById("log-filter"), document.getElementById("log-filter-regex"),
    document.getElementById("log-filter-count"), function () { if (follow.checked) view.scrollTop = view.scrollHeight; });
  window.jobLog = { lastSeq: function () { return lastSeq; }, rendered: function () { return view.childElementCount; } };

  function normalize(line) {
    return Array.isArray(line) ? { seq: line[0], time: line[1], node: line[2], stream: line[3], text: line[4] } : line;
  }
  function row(line) {
    const div = document.createElement("div");
    div.dataset.seq = line.seq;
    if (line.stream !== "stdout") div.className = line.stream;
    div.textContent = (line.node ? "[" + line.node + "] " : "") + line.text;
    return div;
  }
  function updateCount() {
    countEl.textContent = view.childElementCount + " lines shown, last #" + lastSeq;
    earlierBtn.hidden = !(firstSeq !== null && firstSeq > jobFirstSeq);
  }
  function flush() {
    scheduled = false;
    if (!pending.length) return;
    if (follow.checked && pending.length >= WINDOW) {
      // A burst (or a hidden tab catching up): render only the last window, never 100k nodes.
      view.textContent = "";
      pending = pending.slice(pending.length - WINDOW);
    }
    const frag = document.createDocumentFragment();
    for (const line of pending) frag.appendChild(row(line));
    pending = [];
    filter.decorateAll(Array.from(frag.children));  // filtered as drawn: the follow never stops
    view.appendChild(frag);
    if (follow.checked) {
      let extra = view.childElementCount - WINDOW;
      while (extra-- > 0) view.removeChild(view.firstChild);
      view.scrollTop = view.scrollHeight;
    }
    firstSeq = view.firstChild ? Number(view.firstChild.dataset.seq) : firstSeq;
    updateCount();
    filter.count();
  }
  function append(lines) {
    for (const raw of lines) {
      const line = normalize(raw);
      // A job that had no line when the page loaded: its first line is the first one the
      // socket replays (from seq 0), so there is nothing earlier to offer.
      if (jobFirstSeq === 0) jobFirstSeq = line.seq;
      if (line.seq <= lastSeq) continue;  // a repeat: never shown twice
      lastSeq = line.seq;
      pending.push(line);
    }
    if (!scheduled) {
      scheduled = true;
      // Hidden tabs get no animation frames: render on a timer there instead.
      if (document.hidden) setTimeout(flush, 250); else requestAnimationFrame(flush);
    }
  }
  async function loadEarlier() {
    if (firstSeq === null) return;
    const r = await fetch("/api/jobs/" + jobId + "/log?before_seq=" + firstSeq + "&limit=" + PAGE, { credentials: "same-origin" });
    const data = await r.json();
    const frag = document.createDocumentFragment();
    for (const raw of data.lines) frag.appendChild(row(normalize(raw)));
    filter.decorateAll(Array.from(frag.children));
    const before = view.scrollHeight;
    view.insertBefore(frag, view.firstChild);
    view.scrollTop += view.scrollHeight - before;  // keep the reader's place
    follow.checked = false;  // reading history: stop trimming and jumping
    if (data.lines.length) firstSeq = data.lines[0].seq;
    updateCount();
    filter.count();
  }
  earlierBtn.addEventListener("click", loadEarlier);
  view.addEventListener("scroll", function () {
    const atBottom = view.scrollHeight - view.scrollTop - view.clientHeight < 30;
    if (!atBottom && follow.checked && pending.length === 0) follow.checked = false;
    if (atBottom && !follow.checked) follow.checked = true;
  });

  function setState(data) {
    const holder = document.getElementById("job-state");
    holder.innerHTML = '<span class="badge state state-' + data.state + '" data-state-badge>' + data.state + "</span>";
    const err = document.getElementById("job-error");
    if (data.error) { err.hidden = false; err.textContent = data.error; }
    const warnings = document.getElementById("job-warnings");
    if (data.warnings && data.warnings.length) {
      const list = warnings.querySelector("ul");
      list.replaceChildren();
      data.warnings.forEach(function (w) { const li = document.createElement("li"); li.textContent = w; list.append(li); });
      warnings.hidden = false;
    }
    if (data.started_at) document.getElementById("job-started").textContent = data.started_at.replace("T", " ").slice(0, 19);
    if (data.finished_at) document.getElementById("job-finished").textContent = data.finished_at.replace("T", " ").slice(0, 19);
    const final = ["succeeded", "failed", "cancelled", "timed_out", "lost"].includes(data.state);
    const relaunch = document.getElementById("relaunch-form");
    if (relaunch) relaunch.hidden = !final;
    const form = document.getElementById("cancel-form");
    if (form) {
      form.hidden = final;
      if (data.cancel_requested) { const b = document.getElementById("cancel-button"); b.disabled = true; b.textContent = "Cancel requested"; }
    }
  }
  function setStep(step) {
    const tbody = document.querySelector("#job-steps tbody");
    const empty = tbody.querySelector("tr.empty");
    if (empty) empty.remove();
    let tr = document.getElementById("step-" + step.position);
    if (!tr) {
      tr = document.createElement("tr");
      tr.id = "step-" + step.position;
      tr.innerHTML = "<td></td><td></td><td></td><td class='text-end text-nowrap' data-duration></td>";
      tr.children[0].textContent = step.position + 1;
      const label = document.createElement("span");
      label.textContent = (step.node ? "[" + step.node + "] " : "") + step.title;
      tr.children[1].append(label);
      const next = Array.from(tbody.children).find(function (r) { return Number(r.id.slice(5)) > step.position; });
      tbody.insertBefore(tr, next || null);
    }
    const shown = tr.children[2].textContent.trim();
    const done = ["succeeded", "failed", "skipped", "warned", "cancelled"];
    if (done.includes(shown) && !done.includes(step.state)) return;  // a stale snapshot never goes back
    tr.title = step.detail || "";
    tr.children[2].innerHTML = '<span class="badge state state-' + step.state + '">' + step.state + "</span>";
    let warning = tr.querySelector(".step-warning");
    if (step.state === "warned") {
      if (!warning) { warning = document.createElement("div"); warning.className = "step-warning small"; tr.children[1].append(warning); }
      warning.textContent = step.detail || "";
    } else if (warning) { warning.remove(); }
    let note = tr.querySelector(".step-note");
    if (step.state === "skipped" && step.detail) {
      if (!note) { note = document.createElement("div"); note.className = "step-note small text-muted"; tr.children[1].append(note); }
      note.textContent = step.detail;
    }
    // A transfer's bytes, rate and ETA (model download, sync, verification), as they move.
    let moving = tr.querySelector(".step-progress");
    if (["download", "copy", "verify"].includes(step.phase) && step.detail) {
      if (!moving) { moving = document.createElement("div"); moving.className = "step-progress small text-muted"; tr.children[1].append(moving); }
      moving.textContent = step.detail;
    }
    tr.children[3].textContent = step.duration_s != null ? step.duration_s.toFixed(1) + " s" : "";
    updateProgress();
  }
  // Steps done of all declared steps (a launch declares every step up front).
  function updateProgress() {
    const rows = Array.from(document.querySelectorAll("#job-steps tbody tr:not(.empty)"));
    const done = ["succeeded", "failed", "skipped", "warned", "cancelled"];
    const finished = rows.filter(function (r) { return done.includes(r.children[2].textContent.trim()); }).length;
    const bar = document.querySelector("#job-progress .progress-bar");
    const pct = rows.length ? Math.round(100 * finished / rows.length) : 0;
    bar.style.width = pct + "%";
    bar.parentElement.setAttribute("aria-valuenow", String(pct));
    bar.classList.toggle("bg-danger", rows.some(function (r) { return r.children[2].textContent.trim() === "failed"; }));
    document.getElementById("job-progress-text").textContent = rows.length ? finished + " of " + rows.length + " steps done" : "";
  }
  updateProgress();

  // Search the whole log (the DOM holds only a window): matches come from the API, and
  // the lines on screen that match are highlighted too.
  const searchForm = document.getElementById("log-search");
  const matchesBox = document.getElementById("log-matches");
  function highlight(div, term) {
    const text = div.textContent, at = text.toLowerCase().indexOf(term.toLowerCase());
    if (at < 0) return false;
    const mark = document.createElement("mark");
    mark.textContent = text.slice(at, at + term.length);
    div.replaceChildren(text.slice(0, at), mark, text.slice(at + term.length));
    return true;
  }
  async function search(term) {
    view.querySelectorAll("div.match").forEach(function (d) { d.classList.remove("match"); d.textContent = d.textContent; });
    if (!term) { matchesBox.hidden = true; return; }
    const r = await fetch("/api/jobs/" + jobId + "/log/search?q=" + encodeURIComponent(term), { credentials: "same-origin" });
    const data = await r.json();
    const list = document.getElementById("log-matches-lines");
    list.replaceChildren();
    if (!r.ok) {
      document.getElementById("log-matches-count").textContent = (data.detail && data.detail[0] && data.detail[0].msg) || "search failed";
      matchesBox.hidden = false;
      return;
    }
    for (const line of data.lines) {
      const div = row(line);
      div.textContent = "#" + line.seq + " " + div.textContent;
      highlight(div, term);
      list.append(div);
    }
    document.getElementById("log-matches-count").textContent = data.total === 0 ? "No line contains “" + term + "”."
      : data.total + " line" + (data.total === 1 ? "" : "s") + " contain “" + term + "”" + (data.total > data.lines.length ? " (first " + data.lines.length + " shown)" : "");
    matchesBox.hidden = false;
    view.querySelectorAll("div[data-seq]").forEach(function (d) { if (highlight(d, term)) d.classList.add("match"); });
  }
  searchForm.addEventListener("submit", function (e) { e.preventDefault(); search(document.getElementById("log-search-q").value.trim()); });
  document.getElementById("log-matches-close").addEventListener("click", function () {
    document.getElementById("log-search-q").value = ""; search("");
  });

  async function refreshJob() {
    const r = await fetch("/api/jobs/" + jobId, { credentials: "same-origin" });
    if (!r.ok) return;
    const job = await r.json();
    setState(job);
    for (const step of job.steps) { step.job = job.id; setStep(step); }
  }

  async function start() {
    const r = await fetch("/api/jobs/" + jobId + "/log?limit=" + PAGE, { credentials: "same-origin" });
    const data = await r.json();
    jobFirstSeq = data.first_seq;
    append(data.lines);
    flush();
    if (data.lines.length) firstSeq = data.lines[0].seq;
    updateCount();
    PortalLive.connect("/ws/jobs/" + jobId + "/", function (msg) {
      if (msg.event === "job.log") append(msg.data.lines);
      else if (msg.event === "job.state") setState(msg.data);
      else if (msg.event === "job.step") setStep(msg.data);
    }, function (ws) {
      ws.send(JSON.stringify({ after_seq: lastSeq }));
      refreshJob();  // steps and state that changed before this socket joined the group
    });
  }
  start();
})();
