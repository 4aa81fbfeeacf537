// The operation page: subscribe, fetch the events after the last applied seq, apply live ones without
// duplicates or holes (static/js/event_log.js), update the progress bar and the failure box.
import { colour, label } from "./choices.js";
import { agentOrderGate, appendLines, ENDED, EventLog, summaryGate } from "./event_log.js";
import { listen, onSubscribed } from "./live.js";

const root = document.getElementById("operation");
const log = document.querySelector("[data-field=log]");
const field = (name) => root.querySelector(`[data-field=${name}]`);

const isNewest = agentOrderGate();

function render(events) {
  const lines = [];
  for (const event of events) {
    if (event.kind === "log") {
      lines.push({
        seq: event.seq,
        text: event.payload.line,
        className: event.payload.stream === "stderr" ? "log-stderr" : "",
      });
    } else if (event.kind === "progress" && isNewest("progress", event)) {
      showProgress(event.payload.percent, event.payload.stage);
    }
  }
  if (lines.length) appendLines(log, lines);
  root.dataset.lastSeq = events[events.length - 1].seq;
}

function showProgress(percent, stage) {
  if (percent !== undefined) {
    field("progress-bar").style.width = `${percent}%`;
    field("progress").textContent = Math.round(percent);
    root.querySelector("[role=progressbar]").setAttribute("aria-valuenow", Math.round(percent));
  }
  if (stage !== undefined) field("stage").textContent = stage;
}

const isNews = summaryGate();

function showStatus(summary) {
  if (!isNews(summary)) return;
  root.dataset.status = summary.status;
  const badge = field("status");
  badge.className = `status status-${colour("operation", summary.status)}`;
  badge.textContent = label("operation", summary.status);
  field("progress-bar").className = `progress-bar status-${colour("operation", summary.status)}`;
  showProgress(summary.progress, summary.stage);
  // An ended operation cannot be force-failed (the server refuses it too): the form goes with the end.
  const forceFail = field("force-fail");
  if (forceFail) forceFail.hidden = ENDED.has(summary.status);
  if (summary.error) {
    field("failure").hidden = false;
    field("error").textContent = summary.error;
    field("hint").textContent = summary.hint || "";
  }
}

async function fetchPage(after) {
  const response = await fetch(`${root.dataset.eventsUrl}?after_seq=${after}`, { credentials: "same-origin" });
  if (!response.ok) return null;
  const body = await response.json();
  showStatus({ status: body.status });
  return { items: body.results, more: body.next_after_seq !== null };
}

const events = new EventLog({ fetchPage, render });

async function refresh() {
  await events.backfill();
  const detail = await fetch(root.dataset.eventsUrl.replace(/events\/$/, ""), { credentials: "same-origin" });
  if (detail.ok) showStatus(await detail.json());
}

listen(`operation.${root.dataset.operation}`, (message) => {
  if (message.type === "operation.events") events.apply(message.events);
  else if (message.type === "operation.gap") events.backfill();
  else if (message.type === "operation.status") {
    showStatus(message);
    if (message.last_seq > events.lastSeq && !events.pending.size) events.backfill();
  }
});
onSubscribed(() => refresh());
