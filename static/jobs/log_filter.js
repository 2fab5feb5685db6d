// The job log's live filter: narrows the lines on screen (the tail the page keeps) to those
// that match, by text (case-insensitive) or by a JavaScript regex, while the log keeps
// following: a line that arrives is filtered as it is drawn, and clearing the box shows every
// line, those that arrived meanwhile included. A regex is refused before it runs when longer
// than MAX_PATTERN or when it repeats a group that itself repeats or alternates ((a+)+,
// (a|ab)*: the shapes that backtrack exponentially); the rest runs in a worker
// (log_filter_worker.js), never on the page's thread: a batch it has not answered within
// WORKER_BUDGET_MS ends the worker and switches the filter off, saying why — the page never
// freezes.
window.LogFilter = (function () {
  const WORKER_URL = document.currentScript.dataset.worker;
  const MAX_PATTERN = 200;
  const WORKER_BUDGET_MS = 3000;  // generous: the page never waits for it, only the filtered lines do
  const MAX_MARKS = 50;  // highlighted matches per line

  // The first reason a pattern is refused, or "" (a small scan of the pattern: escapes,
  // character classes and groups).
  function refusal(source) {
    if (source.length > MAX_PATTERN) return "The regex is " + source.length + " characters long: at most " + MAX_PATTERN + ".";
    const stack = [{ quant: false, alt: false }];
    let inClass = false;
    for (let i = 0; i < source.length; i++) {
      const c = source[i];
      if (c === "\\") { i++; continue; }
      if (inClass) { if (c === "]") inClass = false; continue; }
      if (c === "[") { inClass = true; continue; }
      const top = stack[stack.length - 1];
      if (c === "(") { stack.push({ quant: false, alt: false }); continue; }
      if (c === "|") { top.alt = true; continue; }
      const repeats = c === "*" || c === "+" || (c === "{" && /^\{\d+(,\d*)?\}/.test(source.slice(i)));
      if (c === ")" && stack.length > 1) {
        const group = stack.pop();
        const next = source[i + 1];
        const quantified = next === "*" || next === "+" || (next === "{" && /^\{\d+(,\d*)?\}/.test(source.slice(i + 1)));
        if (quantified && (group.quant || group.alt)) {
          return "The regex repeats a group that itself repeats or alternates (such as (a+)+ or (a|ab)*): " +
            "that can freeze the page. Write it without the nested repetition.";
        }
        const parent = stack[stack.length - 1];
        parent.quant = parent.quant || group.quant || quantified;
        continue;
      }
      if (repeats) top.quant = true;
    }
    try { new RegExp(source); } catch (e) { return "Not a valid regex: " + e.message + "."; }
    return "";
  }

  // [start, end) of each match of a text (at most MAX_MARKS), or null when none.
  function textMatcher(term) {
    const needle = term.toLowerCase();
    return function (text) {
      const hay = text.toLowerCase(), spans = [];
      let at = hay.indexOf(needle);
      while (at >= 0 && spans.length < MAX_MARKS) { spans.push([at, at + needle.length]); at = hay.indexOf(needle, at + needle.length); }
      return spans.length ? spans : null;
    };
  }

  function mark(div, spans) {
    const text = div.textContent, parts = [];
    let from = 0;
    for (const [start, end] of spans) {
      parts.push(text.slice(from, start));
      const m = document.createElement("mark");
      m.textContent = text.slice(start, end);
      parts.push(m);
      from = end;
    }
    parts.push(text.slice(from));
    div.replaceChildren(...parts);
  }

  // view: the log box (one div[data-seq] a line); input, regexBox, status: the controls;
  // onChange: called once lines were shown or hidden.
  function create(view, input, regexBox, status, onChange) {
    let mode = null, test = null, source = "";  // mode: null (every line shown), "text" or "regex"
    let worker = null, batches = new Map(), batchId = 0, generation = 0, notice = "";
    function lines() { return view.querySelectorAll("div[data-seq]"); }
    function reset(div) {
      div.classList.remove("filter-hit", "filter-out", "filter-pending");
      if (div.querySelector("mark")) div.textContent = div.textContent;
    }
    function show(div, spans) {
      div.classList.remove("filter-pending");
      if (spans) { div.classList.remove("filter-out"); div.classList.add("filter-hit"); mark(div, spans); } else div.classList.add("filter-out");
    }
    function count() {
      // Off: the reason it was refused or switched off stays until the box changes.
      status.classList.toggle("text-danger", !mode && notice !== "");
      if (!mode) { status.textContent = notice; view.dataset.filter = ""; return; }
      const total = lines().length, hits = view.querySelectorAll("div.filter-hit").length;
      status.textContent = hits.toLocaleString("en") + " of " + total.toLocaleString("en") + " line" + (total === 1 ? "" : "s") + " match";
      view.dataset.filter = "on";
    }
    function stopWorker() {
      batches.forEach(function (b) { clearTimeout(b.timer); });
      batches.clear();
      if (worker) { worker.terminate(); worker = null; }
    }
    function off(message) {
      mode = null; test = null; generation++; notice = message || "";
      stopWorker();
      lines().forEach(reset);
      count();
      onChange();
    }
    function answered(e) {
      const batch = batches.get(e.data.id);
      if (!batch) return;
      batches.delete(e.data.id);
      clearTimeout(batch.timer);
      if (batch.generation !== generation) return;
      batch.divs.forEach(function (div, i) { show(div, e.data.results[i]); });
      count();
      onChange();
    }
    // Regex: the batch is hidden until the worker answers (or the budget ends it).
    function sendBatch(divs) {
      if (!worker) { worker = new Worker(WORKER_URL); worker.onmessage = answered; }
      divs.forEach(function (div) { div.classList.add("filter-out", "filter-pending"); });
      const id = ++batchId;
      batches.set(id, { divs: divs, generation: generation, timer: setTimeout(function () {
        off("The regex took over " + WORKER_BUDGET_MS / 1000 + " s on " + divs.length + " line" + (divs.length === 1 ? "" : "s") +
            " and was switched off (the page did not wait for it): try a simpler pattern, or plain text.");
      }, WORKER_BUDGET_MS) });
      worker.postMessage({ id: id, source: source, texts: divs.map(function (d) { return d.textContent; }), max: MAX_MARKS });
    }
    // Filters new rows (called by the log as it draws them).
    function decorateAll(divs) {
      if (!mode || !divs.length) return;
      if (mode === "regex") { sendBatch(divs); return; }
      for (const div of divs) show(div, test(div.textContent));
    }
    function apply() {
      const term = input.value;
      generation++; notice = "";
      stopWorker();
      lines().forEach(reset);
      mode = null;
      input.removeAttribute("aria-invalid");
      if (!term) { count(); onChange(); return; }
      if (regexBox.checked) {
        const why = refusal(term);
        if (why) { off(why); input.setAttribute("aria-invalid", "true"); return; }
        mode = "regex"; source = term;
      } else { mode = "text"; test = textMatcher(term); }
      decorateAll(Array.from(lines()));
      count();
      onChange();
    }
    input.addEventListener("input", apply);
    regexBox.addEventListener("change", apply);
    return { decorateAll: decorateAll, count: count, active: function () { return mode !== null; } };
  }
  return { create: create, refusal: refusal };
})();
