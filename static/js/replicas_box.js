// The deployment page's replicas card: when a replica of the primary comes, goes or changes state
// ("deployment.replicas" on the primary's group), or the primary itself changes, and after every
// (re)connect, the card is fetched again as the server renders it.
import { listen, onSubscribed } from "./live.js";

const box = () => document.querySelector("[data-replicas-box]");

async function refresh() {
  const current = box();
  const response = await fetch(current.dataset.url, { credentials: "same-origin" });
  if (!response.ok) return;
  const holder = document.createElement("template");
  holder.innerHTML = (await response.text()).trim();
  const fresh = holder.content.querySelector("[data-replicas-box]");
  if (fresh) current.replaceWith(fresh);
}

const initial = box();
if (initial) {
  listen(`deployment.${initial.dataset.primary}`, (message) => {
    if (message.type === "deployment.replicas" || message.type === "deployment.status") refresh();
  });
  onSubscribed(() => refresh());
}
