// Dashboard cards: filled from the last scrape, then from each metrics.tick; alerts follow
// alert.changed. A second socket to /ws/dashboard/ keeps this independent of the page's own.
// It runs once the page is parsed: the cards sit in the content, live.js loads after it.
document.addEventListener("DOMContentLoaded", function () {
  const initial = JSON.parse(document.getElementById("metrics-initial").textContent);
  const MAX_POINTS = 180;  // 15 min at 5 s
  const sparks = { lane: {}, node: {} };
  function cardOf(kind, name) { return document.querySelector(`.${kind}-card[data-${kind}="${CSS.escape(name)}"]`); }
  ["lane", "node"].forEach(function (kind) {
    initial[kind + "s"].forEach(function (entry) {
      const card = cardOf(kind, entry.name);
      SparkMetrics.updateCard(card, { figures: entry.figures, state: entry.state });
      const canvas = card && card.querySelector("canvas.sparkline");
      if (canvas) { sparks[kind][entry.name] = SparkMetrics.sparkline(canvas, (initial.sparklines[kind] || {})[entry.name] || []); }
    });
  });
  const SPARK_SERIES = { lane: "gen_tps", node: "mem_avail_gib" };
  function onTick(d) {
    ["lane", "node"].forEach(function (kind) {
      Object.entries(d[kind + "s"] || {}).forEach(function ([name, entry]) {
        SparkMetrics.updateCard(cardOf(kind, name), entry);
        const chart = sparks[kind][name];
        const value = (entry.figures || {})[SPARK_SERIES[kind]];
        if (chart && value !== undefined) { SparkMetrics.push(chart, SparkMetrics.clock(d.at), [value], MAX_POINTS); }
      });
    });
    const strip = document.getElementById("gateway-strip");
    if (strip && d.gateway) {
      strip.querySelectorAll("[data-figure]").forEach(function (el) { el.textContent = SparkMetrics.format(el.dataset.figure, d.gateway[el.dataset.figure]); });
    }
    const box = document.getElementById("metrics-dashboard");
    box.dataset.lastTick = d.at;
  }
  function onAlert(d) {
    const list = document.getElementById("open-alerts");
    const existing = list.querySelector(`li[data-alert="${d.id}"]`);
    if (d.state !== "open") { if (existing) existing.remove(); }
    else {
      const li = existing || document.createElement("li");
      li.className = "list-group-item"; li.dataset.alert = d.id;
      const strong = document.createElement("strong"); strong.textContent = d.rule_label + " ";
      li.replaceChildren(strong, document.createTextNode(d.message + (d.acknowledged_by ? ` (acknowledged by ${d.acknowledged_by})` : "")));
      const box = document.getElementById("metrics-dashboard");
      if (!d.acknowledged_by && box.dataset.canAck) {
        // An alert that opens while the page is open can be acknowledged from it, like the rendered ones.
        const form = document.createElement("form");
        form.method = "post"; form.action = `/monitor/alerts/${encodeURIComponent(d.id)}/ack`; form.className = "d-inline ms-2";
        for (const [name, value] of [["csrfmiddlewaretoken", box.dataset.csrf], ["next", "/"]]) {
          const input = document.createElement("input"); input.type = "hidden"; input.name = name; input.value = value;
          form.append(input);
        }
        const button = document.createElement("button");
        button.className = "btn btn-sm btn-outline-secondary py-0"; button.textContent = "Acknowledge";
        form.append(button);
        li.append(form);
      }
      if (!existing) { list.prepend(li); }
    }
    // The header's badge follows its own socket on every page (portal/header.js).
    document.getElementById("alerts-card").classList.toggle("d-none", list.children.length === 0);
  }
  PortalLive.connect("/ws/dashboard/", function (msg) {
    if (msg.event === "metrics.tick") { onTick(msg.data); }
    if (msg.event === "alert.changed") { onAlert(msg.data); }
  });
});
