// The deployment page's diagnostics box: when the panel says a collection started or its bundle was packed
// ("deployment.diagnostics"), and after every (re)connect, the box is fetched again as the server renders it.
import { listen, onSubscribed } from "./live.js";

const box = () => document.querySelector("[data-testid=diagnostics][data-box-url]");

async function refresh() {
  const current = box();
  if (!current) return;
  const response = await fetch(current.dataset.boxUrl, { credentials: "same-origin" });
  if (!response.ok) return;
  const holder = document.createElement("template");
  holder.innerHTML = (await response.text()).trim();
  const fresh = holder.content.querySelector("[data-testid=diagnostics]");
  if (fresh) current.replaceWith(fresh);
}

const initial = box();
if (initial) {
  listen(`deployment.${initial.dataset.deployment}`, (message) => {
    if (message.type === "deployment.diagnostics") refresh();
  });
  onSubscribed(() => refresh());
}
