// The model page: live progress of its running operations (percent, stage, bytes, rate, time left).
// A finished operation reloads the page, so new copies and facts appear without a manual refresh.
import { listen, onSubscribed } from "./live.js";
import { colour as colourOf, ENDED } from "./choices.js";
import { formatBytes, formatDuration, MISSING } from "./format.js";

const rows = [...document.querySelectorAll("[data-operation]")].filter((row) => !ENDED.has(row.dataset.status));

function field(row, name) {
  return row.querySelector(`[data-field=${name}]`);
}

function showProgress(row, payload) {
  if (payload.percent !== undefined) {
    field(row, "bar").style.width = `${payload.percent}%`;
    row.querySelector("[role=progressbar]").setAttribute("aria-valuenow", Math.round(payload.percent));
  }
  if (payload.stage !== undefined) field(row, "stage").textContent = payload.stage;
  if (payload.bytes_done !== undefined) {
    const total = payload.bytes_total ? ` / ${formatBytes(payload.bytes_total)}` : "";
    field(row, "bytes").textContent = `${formatBytes(payload.bytes_done)}${total}`;
  }
  if (payload.rate_bps !== undefined) field(row, "rate").textContent = `${formatBytes(payload.rate_bps)}/s`;
  if (payload.eta_s !== undefined) field(row, "eta").textContent = payload.eta_s === null ? MISSING : formatDuration(payload.eta_s);
}

function showStatus(row, summary) {
  const colour = colourOf("operation", summary.status);
  row.dataset.status = summary.status;
  const badge = field(row, "status");
  badge.className = `status status-${colour}`;
  badge.textContent = summary.status;
  field(row, "bar").className = `progress-bar status-${colour}`;
  showProgress(row, { percent: summary.progress, stage: summary.stage });
  if (ENDED.has(summary.status) && !row.dataset.reloading) {
    row.dataset.reloading = "1";
    setTimeout(() => window.location.reload(), 1000);
  }
}

for (const row of rows) {
  const id = row.dataset.operation;
  listen(`operation.${id}`, (message) => {
    if (message.type === "operation.events") {
      const progress = message.events.filter((e) => e.kind === "progress").pop();
      if (progress) showProgress(row, progress.payload);
    } else if (message.type === "operation.status") {
      showStatus(row, message);
    }
  });
}

onSubscribed(async () => {
  for (const row of rows) {
    const response = await fetch(`/api/v1/operations/${row.dataset.operation}/`, { credentials: "same-origin" });
    if (response.ok) showStatus(row, await response.json());
  }
});
