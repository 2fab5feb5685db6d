// The lane form's node picker: the hidden "nodes" field holds the names in rank order
// (what the service reads); this list edits it. Tensor-parallel size follows the number of
// nodes while it still equals the old count (one GB10 GPU per Spark).
(function () {
  const input = document.getElementById("id_nodes");
  const chosen = document.getElementById("nodes-chosen");
  const available = document.getElementById("nodes-available");
  if (!input || !chosen || !available) return;
  const tp = document.getElementById("id_tensor_parallel_size");
  const registered = new Set(Array.from(available.querySelectorAll("[data-node]")).map(function (b) { return b.dataset.node; }));
  let names = input.value.split(/[\s,]+/).filter(Boolean);

  function button(label, title, onClick) {
    const b = document.createElement("button");
    b.type = "button"; b.className = "btn btn-sm btn-link p-0 px-1"; b.textContent = label; b.title = title;
    b.addEventListener("click", onClick);
    return b;
  }
  function move(i, by) { const j = i + by; if (j < 0 || j >= names.length) return; [names[i], names[j]] = [names[j], names[i]]; render(); }
  function render() {
    const before = Number(input.dataset.count || names.length);
    input.value = names.join(", ");
    if (tp && Number(tp.value) === before && names.length) tp.value = names.length;
    input.dataset.count = names.length;
    chosen.replaceChildren();
    if (!names.length) {
      const li = document.createElement("li"); li.className = "list-group-item text-muted empty";
      li.textContent = "none yet: add nodes from the right"; chosen.append(li);
    }
    names.forEach(function (name, i) {
      const li = document.createElement("li");
      li.className = "list-group-item d-flex align-items-center gap-1";
      li.dataset.node = name;
      const label = document.createElement("span");
      label.className = "fw-semibold me-1"; label.textContent = name;
      li.append(label);
      const role = document.createElement("span");
      role.className = "text-muted small"; role.textContent = i === 0 ? "head" : "worker";
      li.append(role);
      if (!registered.has(name)) {
        const warn = document.createElement("span"); warn.className = "badge bg-danger"; warn.textContent = "not registered"; li.append(warn);
      }
      const tools = document.createElement("span"); tools.className = "ms-auto text-nowrap";
      tools.append(button("↑", "move up (towards head)", function () { move(i, -1); }),
                   button("↓", "move down", function () { move(i, 1); }),
                   button("✕", "remove", function () { names.splice(i, 1); render(); }));
      li.append(tools);
      chosen.append(li);
    });
    available.querySelectorAll("[data-node]").forEach(function (b) { b.hidden = names.includes(b.dataset.node); });
  }
  available.addEventListener("click", function (e) {
    const b = e.target.closest("[data-node]");
    if (!b || names.includes(b.dataset.node)) return;
    names.push(b.dataset.node);
    render();
  });
  input.dataset.count = names.length;
  render();
})();
