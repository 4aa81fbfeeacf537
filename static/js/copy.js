// Copy buttons: <button data-copy="#id"> copies the text of #id. Plain-http panels have no clipboard
// API, so the text is selected and copied the old way instead.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.querySelector(button.dataset.copy);
  if (!source) return;
  try {
    await navigator.clipboard.writeText(source.textContent);
  } catch {
    const range = document.createRange();
    range.selectNodeContents(source);
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    document.execCommand("copy");
  }
  const label = button.textContent;
  button.textContent = "✓";
  setTimeout(() => (button.textContent = label), 1200);
});
