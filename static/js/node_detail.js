// The node page: its status badge follows heartbeats live, each NPU row shows the newest metrics frame
// (AI Core, memory, temperature, power; about one a second) and its health state as the policy or an admin
// changes it (npu_health frames), and the page reloads once an operation on this node succeeds (an
// inventory brings new facts, NPUs and versions that are rendered server-side).
import { colour, label } from "./choices.js";
import { listen, onSubscribed } from "./live.js";
import { MISSING, formatBytes, formatDateTime, formatPercent, formatPower, formatTemperature } from "./format.js";

const root = document.getElementById("node");
const name = root.dataset.node;
const badge = document.querySelector(`[data-node-status="${CSS.escape(name)}"]`);
const labels = JSON.parse(document.getElementById("node-status-labels")?.textContent || "{}");
const sampled = root.querySelector('[data-live="sampled"]');
const rows = new Map(
  [...root.querySelectorAll("[data-testid=npu-table] tr[data-npu]")].map((row) => [row.dataset.npu, row]),
);

function showStatus(status) {
  if (!badge) return;
  for (const name of [...badge.classList]) if (name.startsWith("status-")) badge.classList.remove(name);
  badge.classList.add(`status-${colour("node", status)}`);
  if (labels[status]) badge.textContent = labels[status];
}

function setCell(row, field, text) {
  const cell = row.querySelector(`[data-live="${field}"]`);
  if (cell && cell.textContent !== text) cell.textContent = text;
}

function memoryText(npu) {
  // HBM on 910 chips, DDR on 310P cards (which report no HBM).
  const hbm = npu.hbm_total_mb > 0;
  const used = hbm ? npu.hbm_used_mb : npu.memory_used_mb;
  const total = hbm ? npu.hbm_total_mb : npu.memory_total_mb;
  if (used === null || used === undefined) return MISSING;
  return total ? `${formatBytes(used, "MB")} / ${formatBytes(total, "MB")}` : formatBytes(used, "MB");
}

function showMetrics(message) {
  for (const npu of message.npus || []) {
    const row = rows.get(`${npu.npu_id}/${npu.chip_id}`);
    if (!row) continue;
    setCell(row, "aicore", formatPercent(npu.aicore_pct));
    setCell(row, "memory", memoryText(npu));
    setCell(row, "temp", formatTemperature(npu.temp_c));
    setCell(row, "power", formatPower(npu.power_w));
  }
  if (sampled && message.time) {
    sampled.textContent = formatDateTime(message.time);
    sampled.dataset.seq = String(message.seq ?? "");
  }
}

function showHealthState(message) {
  const cell = rows.get(`${message.npu_id}/${message.chip_id}`)?.querySelector('[data-field="health-state"]');
  const state = cell?.querySelector(".status");
  if (!state) return;
  for (const name of [...state.classList]) if (name.startsWith("status-")) state.classList.remove(name);
  state.classList.add(`status-${colour("npu_health_state", message.new)}`);
  state.textContent = label("npu_health_state", message.new);
  const why = cell.querySelector('[data-field="health-reason"]');
  if (why) why.textContent = message.reason?.detail || "";
  const choice = cell.querySelector("select[name=state]");
  if (choice) choice.value = message.new;
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
  else if (message.type === "metrics" && !message.error) showMetrics(message);
  else if (message.type === "npu_health") showHealthState(message);
  else if (message.type === "operation.status" && message.status === "succeeded" && message.final_seq !== null) {
    location.reload();
  }
});
onSubscribed(refresh);
