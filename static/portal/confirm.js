// The portal's one confirmation (templates/portal/_confirm_dialog.html): a form with
// data-confirm-title (or the submit button pressed, for forms whose buttons do different
// things) is sent only after its dialog is confirmed. The dialog says what will happen
// (data-confirm-text; data-confirm-checked-text instead when the form's checkbox named in
// data-confirm-checkbox is ticked) and names the action on its button (data-confirm-label);
// data-confirm-style="primary" for a costly rather than destructive action. Escape, the ✕ and
// Cancel send nothing; focus starts on Cancel and returns to the button that asked.
(function () {
  const dialog = document.getElementById("confirm-dialog");
  if (!dialog || typeof bootstrap === "undefined") return;
  const modal = bootstrap.Modal.getOrCreateInstance(dialog);
  const ok = document.getElementById("confirm-dialog-ok");
  let pending = null;  // {form, submitter} waiting for an answer
  let confirmed = null;  // the form being sent after a yes: not asked again

  function question(form, submitter) {
    const source = submitter && submitter.dataset.confirmTitle ? submitter : form.dataset.confirmTitle ? form : null;
    if (!source) return null;
    const d = source.dataset;
    const box = d.confirmCheckbox ? form.elements[d.confirmCheckbox] : null;
    return {
      title: d.confirmTitle,
      text: box && box.checked && d.confirmCheckedText ? d.confirmCheckedText : d.confirmText || "",
      label: d.confirmLabel || "Confirm",
      style: d.confirmStyle || "danger",
    };
  }
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || confirmed === form) { confirmed = null; return; }
    const submitter = event.submitter || null;
    const ask = question(form, submitter);
    if (!ask) return;
    event.preventDefault();
    pending = { form: form, submitter: submitter, back: document.activeElement };
    document.getElementById("confirm-dialog-title").textContent = ask.title;
    document.getElementById("confirm-dialog-text").textContent = ask.text;
    ok.textContent = ask.label;
    ok.className = "btn btn-" + ask.style;
    modal.show();
  }, true);
  ok.addEventListener("click", function () {
    const asked = pending;
    pending = null;
    modal.hide();
    if (!asked) return;
    confirmed = asked.form;
    // requestSubmit keeps the pressed button's name and value (the node actions' `action`)
    if (asked.submitter) { asked.form.requestSubmit(asked.submitter); } else { asked.form.requestSubmit(); }
  });
  dialog.addEventListener("shown.bs.modal", function () { document.getElementById("confirm-dialog-cancel").focus(); });
  dialog.addEventListener("hidden.bs.modal", function () {
    const asked = pending;
    pending = null;  // dismissed: nothing is sent
    const back = asked && (asked.submitter || (asked.back !== document.body && asked.back) ||
                           asked.form.querySelector("[type=submit]"));
    if (back && document.body.contains(back)) setTimeout(function () { back.focus(); }, 0);
  });
})();
