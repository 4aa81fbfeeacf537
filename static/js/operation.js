// The operation page: subscribe, fetch the events after the last applied seq, apply live ones without
// duplicates or holes (a gap triggers a fetch), update the progress bar and the failure box.
import { listen, onSubscribed } from "./live.js";

const root = document.getElementById("operation");
const log = document.querySelector("[data-field=log]");
const field = (name) => root.querySelector(`[data-field=${name}]`);
const labels = JSON.parse(document.getElementById("status-labels")?.textContent || "{}");
const colours = { pending: "offline", running: "running", succeeded: "ok", failed: "alarm", cancelled: "warning" };
let lastSeq = 0;
let fetching = null;
const pending = new Map(); // seq -> event that arrived ahead of a hole

function appendEvent(event) {
  if (event.kind === "log") {
    const line = document.createElement("div");
    line.className = event.payload.stream === "stderr" ? "log-line log-stderr" : "log-line";
    line.textContent = event.payload.line;
    line.dataset.seq = event.seq;
    log.appendChild(line);
  } else if (event.kind === "progress") {
    showProgress(event.payload.percent, event.payload.stage);
  }
}

function apply(events) {
  for (const event of events) if (event.seq > lastSeq) pending.set(event.seq, event);
  const stick = log.scrollTop + log.clientHeight >= log.scrollHeight - 20;
  while (pending.has(lastSeq + 1)) {
    const event = pending.get(lastSeq + 1);
    pending.delete(lastSeq + 1);
    appendEvent(event);
    lastSeq = event.seq;
  }
  root.dataset.lastSeq = lastSeq;
  if (stick) log.scrollTop = log.scrollHeight;
  if (pending.size) backfill(); // a hole: fetch it rather than wait
}

function showProgress(percent, stage) {
  if (percent !== undefined) {
    field("progress-bar").style.width = `${percent}%`;
    field("progress").textContent = Math.round(percent);
    root.querySelector("[role=progressbar]").setAttribute("aria-valuenow", Math.round(percent));
  }
  if (stage !== undefined) field("stage").textContent = stage;
}

function showStatus(summary) {
  root.dataset.status = summary.status;
  const badge = field("status");
  badge.className = `status status-${colours[summary.status] || "offline"}`;
  badge.textContent = labels[summary.status] || summary.status;
  field("progress-bar").className = `progress-bar status-${colours[summary.status] || "offline"}`;
  showProgress(summary.progress, summary.stage);
  if (summary.error) {
    field("failure").hidden = false;
    field("error").textContent = summary.error;
    field("hint").textContent = summary.hint || "";
  }
}

async function backfill() {
  if (fetching) return fetching;
  fetching = (async () => {
    let after = lastSeq;
    for (;;) {
      const response = await fetch(`${root.dataset.eventsUrl}?after_seq=${after}`, { credentials: "same-origin" });
      if (!response.ok) break;
      const body = await response.json();
      apply(body.results.map((e) => ({ ...e, operation: body.operation })));
      showStatus({ status: body.status });
      if (body.next_after_seq === null) break;
      after = body.next_after_seq;
    }
    const detail = await fetch(root.dataset.eventsUrl.replace(/events\/$/, ""), { credentials: "same-origin" });
    if (detail.ok) showStatus(await detail.json());
  })().finally(() => {
    fetching = null;
  });
  return fetching;
}

listen(`operation.${root.dataset.operation}`, (message) => {
  if (message.type === "operation.events") apply(message.events);
  else if (message.type === "operation.gap") backfill();
  else if (message.type === "operation.status") {
    showStatus(message);
    if (message.last_seq > lastSeq && !pending.size) backfill();
  }
});
onSubscribed(() => backfill());
