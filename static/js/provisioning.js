// A node's provisioning page: live preflight and install. Subscribe, back-fill events over REST, then apply
// live ones in sequence order; the install card shows a row per step, progress, a log tail and the failure.
// When an operation ends the page reloads, so the checklist and the stack come from what the panel stored.
import { colour, label } from "./choices.js";
import { agentOrderGate, ENDED, summaryGate } from "./event_log.js";
import { listen, onSubscribed } from "./live.js";

const LOG_TAIL = 200;

function track(card) {
  if (!card?.dataset.operation) return;
  const field = (name) => card.querySelector(`[data-field=${name}]`);
  const steps = new Map(); // step name -> row
  const pending = new Map();
  let lastSeq = 0;
  let fetching = null;
  let finished = ENDED.has(card.dataset.status);
  const isNewest = agentOrderGate(); // a late batch's step state or progress never undoes a newer one

  function stepRow(name, title) {
    const body = field("steps")?.querySelector("tbody");
    if (!body) return null;
    if (!steps.has(name)) {
      const row = body.insertRow();
      row.dataset.step = name;
      row.insertCell().className = "num";
      row.cells[0].textContent = steps.size + 1;
      row.insertCell().textContent = title || name;
      const state = row.insertCell().appendChild(document.createElement("span"));
      state.className = "status status-offline";
      state.textContent = label("operation", "pending"); // not started yet
      steps.set(name, row);
    }
    return steps.get(name);
  }

  function showStep(payload) {
    const row = stepRow(payload.step, payload.title);
    if (!row) return;
    row.dataset.state = payload.state;
    const badge = row.cells[2].firstChild;
    badge.className = `status status-${colour("step", payload.state)}`;
    badge.textContent = label("step", payload.state);
  }

  function showProgress(percent, stage) {
    const bar = field("progress-bar");
    if (bar && percent !== undefined) {
      bar.style.width = `${percent}%`;
      field("progress").textContent = Math.round(percent);
      bar.parentElement.setAttribute("aria-valuenow", Math.round(percent));
    }
    if (stage !== undefined && field("stage")) field("stage").textContent = stage;
  }

  function appendLog(payload) {
    const log = field("log");
    if (!log) return;
    const line = document.createElement("div");
    line.className = payload.stream === "stderr" ? "log-line log-stderr" : "log-line";
    line.textContent = payload.line;
    log.appendChild(line);
    while (log.childElementCount > LOG_TAIL) log.firstElementChild.remove();
    log.scrollTop = log.scrollHeight;
  }

  function applyOne(event) {
    const p = event.payload;
    if (event.kind === "progress") {
      if (isNewest("progress", event)) showProgress(p.percent, p.stage);
    } else if (event.kind === "log") {
      if (p.steps) p.steps.forEach((s) => stepRow(s.name, s.title)); // the plan
      if (p.step_state && isNewest(`step:${p.step}`, event)) showStep({ step: p.step, title: p.title, state: p.step_state });
      appendLog(p);
    }
  }

  function apply(events) {
    for (const event of events) if (event.seq > lastSeq) pending.set(event.seq, event);
    while (pending.has(lastSeq + 1)) {
      const event = pending.get(lastSeq + 1);
      pending.delete(lastSeq + 1);
      applyOne(event);
      lastSeq = event.seq;
    }
    card.dataset.lastSeq = lastSeq;
    if (pending.size) backfill();
  }

  const isNews = summaryGate();

  function showStatus(summary) {
    if (!isNews(summary)) return;
    const badge = field("status");
    if (badge && summary.status) {
      badge.className = `status status-${colour("operation", summary.status)}`;
      badge.textContent = label("operation", summary.status);
      field("progress-bar")?.setAttribute("class", `progress-bar status-${colour("operation", summary.status)}`);
    }
    showProgress(summary.progress, summary.stage);
    if (summary.error && field("failure")) {
      field("failure").hidden = false;
      field("error").textContent = summary.error;
      field("hint").textContent = summary.hint || "";
    }
    const done = summary.final_seq !== null && summary.final_seq !== undefined && lastSeq >= summary.final_seq;
    if (!finished && ENDED.has(summary.status) && done) {
      finished = true;
      card.dataset.status = summary.status;
      setTimeout(() => location.reload(), 800); // render the stored checklist / stack / resume button
    }
  }

  async function backfill() {
    if (fetching) return fetching;
    fetching = (async () => {
      let after = lastSeq;
      for (;;) {
        const response = await fetch(`${card.dataset.eventsUrl}?after_seq=${after}`, { credentials: "same-origin" });
        if (!response.ok) break;
        const body = await response.json();
        apply(body.results);
        if (body.next_after_seq === null) break;
        after = body.next_after_seq;
      }
      const detail = await fetch(card.dataset.eventsUrl.replace(/events\/$/, ""), { credentials: "same-origin" });
      if (detail.ok) showStatus(await detail.json());
    })().finally(() => {
      fetching = null;
    });
    return fetching;
  }

  listen(`operation.${card.dataset.operation}`, (message) => {
    if (message.type === "operation.events") apply(message.events);
    else if (message.type === "operation.gap") backfill();
    else if (message.type === "operation.status") {
      if (message.last_seq > lastSeq) backfill().then(() => showStatus(message));
      else showStatus(message);
    }
  });
  onSubscribed(() => backfill());
  backfill();
}

track(document.querySelector("[data-testid=install]"));
track(document.querySelector("[data-testid=preflight]"));
