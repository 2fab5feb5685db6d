// The log filter's regex runs here, off the page's thread: a pattern that backtracks for ever
// freezes only this worker, which the page ends after its time budget (static/jobs/log_filter.js).
self.onmessage = function (e) {
  const re = new RegExp(e.data.source, "gi");
  const results = e.data.texts.map(function (text) {
    const spans = [];
    let matched = false, m;
    re.lastIndex = 0;
    while (spans.length < e.data.max && re.lastIndex <= text.length && (m = re.exec(text)) !== null) {
      matched = true;
      if (m[0].length === 0) { re.lastIndex++; continue; }  // an empty match (^, x*): the line matches, nothing to mark
      spans.push([m.index, m.index + m[0].length]);
    }
    return matched ? spans : null;
  });
  self.postMessage({ id: e.data.id, results: results });
};
