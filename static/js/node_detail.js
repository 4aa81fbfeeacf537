// The node page: its status badge follows heartbeats live, and the page reloads once an operation on this
// node succeeds (an inventory brings new facts, NPUs and versions that are rendered server-side).
import { listen, onSubscribed } from "./live.js";

const root = document.getElementById("node");
const name = root.dataset.node;
const badge = document.querySelector(`[data-node-status="${CSS.escape(name)}"]`);
const labels = JSON.parse(document.getElementById("node-status-labels")?.textContent || "{}");

function showStatus(status) {
  if (!badge) return;
  badge.classList.remove("status-ok", "status-offline");
  badge.classList.add(status === "online" ? "status-ok" : "status-offline");
  if (labels[status]) badge.textContent = labels[status];
}

async function refresh() {
  const response = await fetch(`/api/v1/nodes/?name=${encodeURIComponent(name)}`, { credentials: "same-origin" });
  if (!response.ok) return;
  const page = await response.json();
  const node = (page.results || page).find((n) => n.name === name);
  if (node) showStatus(node.status);
}

listen(`node.${name}`, (message) => {
  if (message.type === "node.status") showStatus(message.status);
  else if (message.type === "operation.status" && message.status === "succeeded" && message.final_seq !== null) {
    location.reload();
  }
});
onSubscribed(refresh);
