// Every page: show <time datetime> values in the viewer's locale and time zone, also after htmx swaps.
import { localizeTimes } from "./format.js";

localizeTimes(document);
document.body.addEventListener("htmx:afterSwap", (event) => localizeTimes(event.target));

// The language switch submits on change (no inline handler: the Content-Security-Policy refuses those).
for (const select of document.querySelectorAll("select[data-submit-on-change]")) {
  select.addEventListener("change", () => select.form.submit());
}

// Error pages' "Go back" (templates/includes/way_back.html).
for (const button of document.querySelectorAll("[data-history-back]")) {
  button.addEventListener("click", () => history.back());
}
