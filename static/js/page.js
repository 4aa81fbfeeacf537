// Every page: show <time datetime> values in the viewer's locale and time zone, also after htmx swaps.
import { localizeTimes } from "./format.js";

localizeTimes(document);
document.body.addEventListener("htmx:afterSwap", (event) => localizeTimes(event.target));

// Error pages' "Go back" (templates/includes/way_back.html).
for (const button of document.querySelectorAll("[data-history-back]")) {
  button.addEventListener("click", () => history.back());
}
