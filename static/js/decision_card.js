// A deployment page card the server renders (the Decisions card, the Sleep card): when a decision of the
// deployment is recorded or settled ("deployment.decision" on the primary's group), and after every
// (re)connect, the card is fetched again as the server renders it (in the page's language; the frame carries
// its texts in English).
import { localizeTimes } from "./format.js";
import { listen, onSubscribed } from "./live.js";

export function followCard(selector) {
  const box = () => document.querySelector(selector);
  let fetching = false; // one fetch at a time; a frame arriving meanwhile asks for one more after it
  let again = false;

  async function refresh() {
    if (fetching) {
      again = true;
      return;
    }
    fetching = true;
    try {
      const current = box();
      const response = await fetch(current.dataset.url, { credentials: "same-origin" });
      if (!response.ok) return;
      const holder = document.createElement("template");
      holder.innerHTML = (await response.text()).trim();
      const fresh = holder.content.querySelector(selector);
      if (!fresh) return;
      localizeTimes(fresh);
      current.replaceWith(fresh);
    } finally {
      fetching = false;
      if (again) {
        again = false;
        refresh();
      }
    }
  }

  const initial = box();
  if (!initial) return;
  listen(`deployment.${initial.dataset.primary}`, (message) => {
    if (message.type === "deployment.decision") refresh();
  });
  onSubscribed(() => refresh());
}
