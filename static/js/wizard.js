// The deployment wizard's small helpers; the steps themselves are server-rendered forms and the engine
// step's live plan is htmx (hx-post to the plan preview). Here: the placement step's "use the suggestion"
// button and per-node counts, and a Deploy button that cannot be pressed twice.
import "./copy.js";
import "./form_switch.js";

function updateCounts() {
  document.querySelectorAll("section[data-node]").forEach((section) => {
    const count = section.querySelector("[data-count]");
    if (count) count.textContent = section.querySelectorAll("input[name=npus]:checked").length;
  });
}

document.querySelectorAll("[data-apply-suggestion]").forEach((button) =>
  button.addEventListener("click", () => {
    const wanted = new Set(button.dataset.applySuggestion.split(","));
    document.querySelectorAll("input[name=npus]").forEach((box) => {
      if (!box.disabled) box.checked = wanted.has(box.value);
    });
    updateCounts();
  }),
);
document.addEventListener("change", (event) => {
  if (event.target.matches("input[name=npus]")) updateCounts();
});
updateCounts();

document.querySelectorAll("[data-once]").forEach((button) =>
  button.form.addEventListener("submit", () => {
    // Disabled after the browser has taken the form's values, so the POST still goes out once.
    setTimeout(() => (button.disabled = true), 0);
  }),
);
