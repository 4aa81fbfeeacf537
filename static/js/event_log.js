// A numbered event stream shown in order, without duplicates or holes: live events are applied as they
// come, anything ahead of a hole waits while the hole is fetched over REST, and a reconnect back-fills
// from the last applied sequence number (subscribe, then fetch, then apply). Used by the operation page
// (operation events) and the deployment page (engine log lines).
//
//   const log = new EventLog({ fetchPage, render, lastSeq });
//   fetchPage(afterSeq) → Promise<{ items: [{seq, ...}], more: boolean }>   (REST)
//   render(items) — called with the next items in order, at most once per animation frame
//   log.apply(items) for live events; log.backfill() after (re)subscribing.

import { ENDED } from "./choices.js"; // an operation's terminal statuses, as panel/core/domain/choices.py says

export { ENDED };

// Operation summaries ("operation.status") leave from several panel worker threads, one per event batch:
// the one of an older batch can arrive after a newer one (a step's last progress, then its end, within
// milliseconds). The gate this returns says whether a summary is still news: not when it knows fewer events
// than one already shown, nor an open status after an end (an ended operation never reopens).
export function summaryGate() {
  let shownSeq = -1;
  let ended = false;
  return (summary) => {
    if (typeof summary.last_seq === "number" && summary.last_seq < shownSeq) return false;
    if (ended && !ENDED.has(summary.status)) return false;
    if (typeof summary.last_seq === "number") shownSeq = summary.last_seq;
    ended = ended || ENDED.has(summary.status);
    return true;
  };
}

// Which event says the newest thing about a target (a step's state, the progress bar). `seq` is the order
// the panel stored events in, and a late batch is stored after a newer one; the agent's order is its
// delivery (`attempt`) then its own number (`agent_seq`). Without the agent's numbers (an old message) an
// event counts as newest. The gate this returns says whether an event may set the target now.
export function agentOrderGate() {
  const newest = new Map(); // target -> [attempt, agent_seq] of the event that set it
  return (target, event) => {
    if (typeof event.agent_seq !== "number") return true;
    const key = [event.attempt || 0, event.agent_seq];
    const shown = newest.get(target);
    if (shown && (key[0] < shown[0] || (key[0] === shown[0] && key[1] < shown[1]))) return false;
    newest.set(target, key);
    return true;
  };
}

export class EventLog {
  constructor({ fetchPage, render, lastSeq = 0 }) {
    this.fetchPage = fetchPage;
    this.render = render;
    this.lastSeq = lastSeq;
    this.pending = new Map(); // seq -> item that arrived ahead of a hole
    this.ready = []; // in order, not rendered yet
    this.fetching = null;
    this.frame = null;
  }

  apply(items) {
    for (const item of items) if (item.seq > this.lastSeq) this.pending.set(item.seq, item);
    while (this.pending.has(this.lastSeq + 1)) {
      const item = this.pending.get(this.lastSeq + 1);
      this.pending.delete(this.lastSeq + 1);
      this.ready.push(item);
      this.lastSeq = item.seq;
    }
    this.schedule();
    if (this.pending.size) this.backfill(); // a hole: fetch it rather than wait
  }

  // Rendering is batched per frame: a burst of hundreds of log lines costs one layout, not hundreds.
  schedule() {
    if (this.frame !== null || !this.ready.length) return;
    const flush = () => {
      this.frame = null;
      const batch = this.ready;
      this.ready = [];
      if (batch.length) this.render(batch);
    };
    this.frame = document.hidden ? setTimeout(flush, 250) : requestAnimationFrame(flush);
  }

  backfill() {
    if (this.fetching) return this.fetching;
    this.fetching = (async () => {
      for (;;) {
        const before = this.lastSeq;
        const page = await this.fetchPage(before);
        if (!page) break;
        this.apply(page.items);
        if (!page.more || this.lastSeq === before) break;
      }
    })().finally(() => {
      this.fetching = null;
    });
    return this.fetching;
  }
}

// Append log lines to a scrolling box, keeping it pinned to the bottom while the reader is there, and
// keeping at most `maxLines` lines in the page (the rest is in the download).
// `follow()` says whether to scroll to the end; by default, when the reader was already at the end.
export function appendLines(box, lines, { maxLines = 5000, follow = null } = {}) {
  const stick = follow ? follow() : box.scrollTop + box.clientHeight >= box.scrollHeight - 20;
  const fragment = document.createDocumentFragment();
  for (const { seq, text, className } of lines) {
    const line = document.createElement("div");
    line.className = className ? `log-line ${className}` : "log-line";
    line.textContent = text;
    line.dataset.line = seq;
    line.dataset.seq = seq;
    fragment.appendChild(line);
  }
  box.appendChild(fragment);
  while (box.childElementCount > maxLines) box.firstElementChild.remove();
  if (stick) box.scrollTop = box.scrollHeight;
}
