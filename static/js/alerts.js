// Keeps the topbar alert count live (group "alerts") and tells the Alerts page or a node page that its
// table is out of date. The count comes with every alert message, so nothing is fetched.
import { listen } from "./live.js";

const banner = document.querySelector("[data-alert-banner]");
const one = document.querySelector("template[data-alert-one]");
const many = document.querySelector("template[data-alert-many]");

function showCount(count) {
  if (!banner) return;
  banner.dataset.count = String(count);
  banner.hidden = count === 0;
  const text = count === 1 ? one.innerHTML : many.innerHTML.replace("{n}", String(count));
  banner.querySelector("[data-alert-count]").textContent = text;
}

listen("alerts", (message) => {
  if (message.type !== "alert") return;
  showCount(message.open_unacknowledged);
  const refresh = document.querySelector("[data-alert-refresh]");
  if (refresh) refresh.hidden = false;
});
