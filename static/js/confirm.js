// Every page: a submit button (or its form) with data-confirm-text asks before it submits. The dialog shows
// the text; OK carries the button's own label and submits through that button (its formaction included).
// Without JavaScript the form submits at once, as any form does.
let dialog = null;

function confirmDialog() {
  if (dialog) return dialog;
  dialog = document.createElement("dialog");
  dialog.className = "confirm";
  dialog.dataset.testid = "confirm-dialog";
  dialog.innerHTML =
    '<p data-dialog-text></p><div class="form-actions">' +
    '<button type="button" class="btn btn-primary" data-dialog-ok data-testid="confirm-ok"></button>' +
    '<button type="button" class="btn" data-dialog-cancel data-testid="confirm-cancel"></button></div>';
  dialog.querySelector("[data-dialog-cancel]").textContent = document.body.dataset.cancelLabel || "Cancel";
  dialog.querySelector("[data-dialog-cancel]").addEventListener("click", () => dialog.close());
  document.body.append(dialog);
  return dialog;
}

document.addEventListener("submit", (event) => {
  const form = event.target;
  const button = event.submitter;
  const text = (button && button.dataset.confirmText) || form.dataset.confirmText;
  if (!text || form.dataset.confirmed === "yes") return;
  event.preventDefault();
  const box = confirmDialog();
  box.querySelector("[data-dialog-text]").textContent = text;
  const ok = box.querySelector("[data-dialog-ok]");
  ok.textContent = (button && button.textContent.trim()) || "OK";
  ok.className = button && button.classList.contains("btn-danger") ? "btn btn-danger" : "btn btn-primary";
  ok.onclick = () => {
    box.close();
    form.dataset.confirmed = "yes";
    form.requestSubmit(button || undefined);
    delete form.dataset.confirmed;
  };
  box.showModal();
});
