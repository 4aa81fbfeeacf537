// Every page: show <time datetime> values in the viewer's locale and time zone, also after htmx swaps.
import { localizeTimes } from "./format.js";

localizeTimes(document);
document.body.addEventListener("htmx:afterSwap", (event) => localizeTimes(event.target));
