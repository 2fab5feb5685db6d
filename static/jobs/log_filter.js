// The job log's live filter: narrows the lines on screen (the tail the page keeps) to those
// that match, by text (case-insensitive) or by a JavaScript regex, while the log keeps
// following: a line that arrives is filtered as it is drawn, and clearing the box shows every
// line, those that arrived meanwhile included. A regex that could freeze the page is refused
// before it runs: longer than MAX_PATTERN, or a repeated group that itself repeats or
// alternates ((a+)+, (a|ab)*: the shapes that backtrack exponentially); and a filter that
// spends more than BUDGET_MS on one batch of lines switches itself off and says why.
window.LogFilter = (function () {
  const MAX_PATTERN = 200;
  const BUDGET_MS = 250;
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

  // [start, end) of each match in a text (at most MAX_MARKS), or null when none.
  function matcher(term, isRegex) {
    if (isRegex) {
      const re = new RegExp(term, "gi");
      return function (text) {
        const spans = [];
        let matched = false, m;
        re.lastIndex = 0;
        while (spans.length < MAX_MARKS && re.lastIndex <= text.length && (m = re.exec(text)) !== null) {
          matched = true;
          if (m[0].length === 0) { re.lastIndex++; continue; }  // an empty match (^, x*): the line matches, nothing to mark
          spans.push([m.index, m.index + m[0].length]);
        }
        return matched ? spans : null;
      };
    }
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

  // view: the log box (one div[data-seq] a line); input, regexBox, status: the controls.
  function create(view, input, regexBox, status, onChange) {
    let test = null;  // the active matcher, or null: every line shown
    function lines() { return view.querySelectorAll("div[data-seq]"); }
    function reset(div) { div.classList.remove("filter-hit", "filter-out"); if (div.querySelector("mark")) div.textContent = div.textContent; }
    function decorate(div) {
      if (!test) return;
      const spans = test(div.textContent);
      if (spans) { div.classList.add("filter-hit"); mark(div, spans); } else div.classList.add("filter-out");
    }
    function count() {
      if (!test) { status.textContent = ""; status.classList.remove("text-danger"); view.dataset.filter = ""; return; }
      const total = view.querySelectorAll("div[data-seq]").length, hits = view.querySelectorAll("div.filter-hit").length;
      status.classList.remove("text-danger");
      status.textContent = hits.toLocaleString("en") + " of " + total.toLocaleString("en") + " line" + (total === 1 ? "" : "s") + " match";
      view.dataset.filter = "on";
    }
    function off(message) {
      test = null;
      lines().forEach(reset);
      count();
      if (message) { status.textContent = message; status.classList.add("text-danger"); }
    }
    // Filters new rows (called by the log as it draws them); false when the filter switched off.
    function decorateAll(divs) {
      if (!test) return;
      const started = performance.now();
      for (const div of divs) {
        decorate(div);
        if (performance.now() - started > BUDGET_MS) {
          off("The filter took over " + BUDGET_MS + " ms on " + divs.length + " lines and was switched off: try a simpler pattern.");
          return;
        }
      }
    }
    function apply() {
      const term = input.value;
      lines().forEach(reset);
      test = null;
      if (!term) { count(); onChange(); return; }
      if (regexBox.checked) {
        const why = refusal(term);
        if (why) { off(why); input.setAttribute("aria-invalid", "true"); onChange(); return; }
      }
      input.removeAttribute("aria-invalid");
      test = matcher(term, regexBox.checked);
      decorateAll(Array.from(lines()));
      count();
      onChange();
    }
    input.addEventListener("input", apply);
    regexBox.addEventListener("change", apply);
    return { decorateAll: decorateAll, count: count, active: function () { return test !== null; } };
  }
  return { create: create, refusal: refusal };
})();
