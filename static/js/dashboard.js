// The dashboard: fleet figures and, for the nodes on this page, a card per NPU, kept live from the
// websocket groups `fleet` (the fleet summary, counted by the server, and node status) and `node.<name>` of
// the nodes on this page only (one metrics frame a second per node, their alerts). A fleet of 512 nodes
// costs a viewer one summary a second plus its page's nodes, never every NPU of the fleet.
//
// Built for 50 nodes × 8 NPUs at 1 Hz: every element a frame touches is looked up once, a text node is
// written only when its text changes, nothing reads layout, sparklines draw in one animation frame and only
// while visible (sparkline.js). After a (re)connect, the latest figures, the open alerts and the last minute
// of history of the page's nodes are fetched so nothing has a hole.
import { listen, onSubscribed } from "./live.js";
import {
  MISSING,
  formatBytes,
  formatNumber,
  formatPercent,
  formatPower,
  formatTemperature,
} from "./format.js";
import { sparklineFor } from "./sparkline.js";
import { NpuChart, epochSeconds, interpolate, seriesKey } from "./npu_chart.js";

const root = document.getElementById("dashboard");
const labels = JSON.parse(document.getElementById("dashboard-labels").textContent);
const cardTemplate = document.getElementById("npu-card-template");
const SPARK_POINTS = 60;
const STALE_AFTER_S = 5;
const BACKFILL_PARALLEL = 4;
const FLUSH_MS = 500;

// Writes only on change: at 512 cards a second, untouched text nodes cost nothing to style or paint.
// A field with data-missing-title says in its title why it shows "—" (data-title otherwise).
function setText(element, text) {
  if (element && element._text !== text) {
    element.textContent = text;
    element._text = text;
    if (element.dataset.missingTitle) {
      element.title = text === MISSING ? element.dataset.missingTitle : element.dataset.title || "";
    }
  }
}

function setStatus(element, colour) {
  if (!element || element._status === colour) return;
  if (element._status === undefined) {
    for (const name of [...element.classList]) if (name.startsWith("status-")) element.classList.remove(name);
  } else {
    element.classList.remove(`status-${element._status}`);
  }
  element.classList.add(`status-${colour}`);
  element._status = colour;
}

function setWidth(element, percent) {
  const width = `${Math.max(0, Math.min(100, Math.round(percent ?? 0)))}%`;
  if (element && element._width !== width) {
    element.style.width = width;
    element._width = width;
  }
}

function fields(element) {
  const found = {};
  for (const field of element.querySelectorAll("[data-f]")) found[field.dataset.f] = field;
  return found;
}

const isNumber = (value) => value !== null && value !== undefined && Number.isFinite(Number(value));
const sum = (values) => values.filter(isNumber).reduce((total, v) => total + Number(v), 0);

// "49.6 / 64 GiB": the unit once when both sides share it, so the figure fits a card at 8 per row.
function memoryText(used, total) {
  const whole = formatBytes(total, "MB");
  if (!isNumber(used)) return `${MISSING} / ${whole}`;
  const part = formatBytes(used, "MB");
  const unit = whole.slice(whole.lastIndexOf(" "));
  return part.endsWith(unit) ? `${part.slice(0, -unit.length)} / ${whole}` : `${part} / ${whole}`;
}

// A fleet draws tens of kilowatts: "105 kW" reads at a glance where "105,384 W" does not.
function formatFleetPower(watts) {
  if (watts < 10000) return formatPower(watts);
  return `${formatNumber(watts / 1000, { maximumFractionDigits: watts < 100000 ? 1 : 0 })} kW`;
}

function healthColour(health, nodeOnline) {
  if (!nodeOnline) return "offline";
  return labels.colours.health[health] || "offline";
}

// ---------------------------------------------------------------------------------------------------
class CardView {
  constructor(element, node) {
    this.element = element;
    this.node = node;
    this.npu = Number(element.dataset.npu);
    this.chip = Number(element.dataset.chip || 0);
    this.f = fields(element);
    this.points = []; // [epoch seconds, AI Core %] for the sparkline, oldest first
    this.lastTime = 0;
    this.latest = null;
    this.spark = sparklineFor(element.querySelector("canvas.sparkline"), { min: 0, max: 100, points: SPARK_POINTS });
    this.memoryTotal = Number(element.dataset.memTotal) || null; // from the last inventory
    setText(this.f.mem, memoryText(null, this.memoryTotal));
  }

  get key() {
    return `${this.npu}/${this.chip}`;
  }

  apply(npu, time) {
    this.latest = npu;
    if (npu.health !== undefined) this.showHealth(npu.health);
    if (npu.name) setText(this.f.name, npu.name);
    setText(this.f.util, formatPercent(npu.aicore_pct));
    const hasHbm = isNumber(npu.hbm_total_mb) && npu.hbm_total_mb > 0;
    const hasDdr = !hasHbm && isNumber(npu.memory_total_mb) && npu.memory_total_mb > 0;
    const used = hasDdr ? npu.memory_used_mb : npu.hbm_used_mb;
    const total = (hasHbm ? npu.hbm_total_mb : hasDdr ? npu.memory_total_mb : null) ?? this.memoryTotal;
    this.memoryTotal = total;
    if (hasHbm || hasDdr) setText(this.f["mem-label"], hasHbm ? labels.hbm : labels.ddr);
    setText(this.f.mem, memoryText(used, total));
    setWidth(this.f["mem-bar"], isNumber(used) && total ? (100 * used) / total : 0);
    setText(this.f.power, formatPower(npu.power_w));
    setText(this.f.temp, formatTemperature(npu.temp_c));
    setText(this.f.holder, holderText(npu));
    if (time !== undefined) this.pushUtil(time, npu.aicore_pct);
  }

  showHealth(health) {
    const colour = healthColour(health, this.node.online);
    setStatus(this.element, colour);
    setStatus(this.f.dot, colour);
    const word = labels.health[health] || health || "";
    if (this.f.dot._title !== word) {
      this.f.dot.title = word;
      this.f.dot._title = word;
    }
    setText(this.f.health, colour === "warning" || colour === "alarm" ? word : "");
  }

  pushUtil(time, value) {
    if (time <= this.lastTime) return; // a duplicate or a late frame: the back-fill already has it
    this.lastTime = time;
    this.points.push([time, isNumber(value) ? Number(value) : null]);
    if (this.points.length > SPARK_POINTS) this.points.splice(0, this.points.length - SPARK_POINTS);
    this.drawSpark();
  }

  // History from the API merged with what arrived live meanwhile (the newer source wins per second).
  mergeHistory(times, values) {
    const bySecond = new Map();
    times.forEach((time, i) => bySecond.set(Math.round(time), values[i]));
    for (const [time, value] of this.points) bySecond.set(Math.round(time), value);
    const merged = [...bySecond.entries()].sort((a, b) => a[0] - b[0]).slice(-SPARK_POINTS);
    this.points = merged;
    this.lastTime = Math.max(this.lastTime, merged.length ? merged[merged.length - 1][0] : 0);
    this.drawSpark();
  }

  drawSpark() {
    // A hole in time (agent restart, lost frames) stays a hole in the line instead of a false slope.
    const values = [];
    let step = Infinity;
    for (let i = 1; i < this.points.length; i++) step = Math.min(step, this.points[i][0] - this.points[i - 1][0]);
    for (let i = 0; i < this.points.length; i++) {
      if (i > 0 && this.points[i][0] - this.points[i - 1][0] > Math.max(step, 1) * 2.5) values.push(null);
      values.push(this.points[i][1]);
    }
    this.spark.update(values.slice(-SPARK_POINTS));
  }
}

function holderText(npu) {
  if (npu.deployment) return npu.deployment;
  const process = (npu.processes || [])[0];
  if (!process) return "";
  const more = npu.processes.length > 1 ? ` +${npu.processes.length - 1}` : "";
  return `${process.name || "?"} (${process.pid})${more}`;
}

// ---------------------------------------------------------------------------------------------------
class NodeView {
  constructor(section, row) {
    this.name = section.dataset.node;
    this.id = section.dataset.nodeId;
    this.section = section;
    this.grid = section.querySelector(".npu-grid");
    this.head = fields(section.querySelector(".node-section-head"));
    this.row = row ? fields(row) : {};
    this.rowElement = row;
    this.status = section.dataset.status;
    this.multiChip = section.dataset.multiChip === "true";
    this.cards = new Map();
    this.lastFrame = 0; // performance.now() of the last metrics frame
    this.figures = { npus: 0, util: null, memoryUsed: null, memoryTotal: 0, power: null };
    // Ids of this node's open alerts: rendered with the page, then kept by its alert messages.
    this.alertIds = new Set((row?.dataset.alertIds || "").split(" ").filter(Boolean).map(Number));
    for (const element of section.querySelectorAll(".npu-card")) {
      const card = new CardView(element, this);
      this.cards.set(card.key, card);
    }
    this.figures.memoryTotal = Number(row?.dataset.memoryTotal) || 0;
    this.figures.npus = this.cards.size;
    this.showFigures();
  }

  get online() {
    return this.status === "online";
  }

  card(npu) {
    const key = `${npu.npu_id}/${npu.chip_id || 0}`;
    let card = this.cards.get(key);
    if (!card) card = this.addCard(npu);
    return card;
  }

  // An NPU the last inventory did not list (or no inventory yet): its card is made from the first frame.
  addCard(npu) {
    const element = cardTemplate.content.firstElementChild.cloneNode(true);
    element.dataset.npu = npu.npu_id;
    element.dataset.chip = npu.chip_id || 0;
    const multiChip = this.multiChip || (npu.chip_id || 0) > 0;
    element.querySelector("[data-f=label]").textContent =
      `${labels.npu} ${npu.npu_id}${multiChip ? `/${npu.chip_id || 0}` : ""}`;
    this.section.querySelector("[data-f=empty]")?.remove();
    // Cards stay in NPU / chip order whatever order the NPUs first appear in.
    const order = (n, c) => n * 1000 + c;
    const mine = order(npu.npu_id, npu.chip_id || 0);
    let after = null;
    for (const other of this.cards.values()) {
      const theirs = order(other.npu, other.chip);
      if (theirs > mine && (!after || theirs < order(after.npu, after.chip))) after = other;
    }
    this.grid.insertBefore(element, after ? after.element : null);
    const card = new CardView(element, this);
    this.cards.set(card.key, card);
    return card;
  }

  applyMetrics(message) {
    this.lastFrame = performance.now();
    const time = epochSeconds(message.time);
    const npus = message.npus || [];
    for (const npu of npus) this.card(npu).apply(npu, time);
    const host = message.host || {};
    setText(this.head.cpu, formatPercent(host.cpu_pct));
    setText(this.row.cpu, formatPercent(host.cpu_pct));
    setText(
      this.head["host-memory"],
      isNumber(host.memory_total_mb) ? memoryText(host.memory_used_mb, host.memory_total_mb) : MISSING,
    );
    setText(this.head.load, formatNumber(host.load1, { maximumFractionDigits: 2 }));
    this.note = message.error || "";
    this.showNote();
    if (npus.length) {
      const memory = npus.map((n) => (n.hbm_total_mb ? [n.hbm_used_mb, n.hbm_total_mb] : [n.memory_used_mb, n.memory_total_mb]));
      const utils = npus.map((n) => n.aicore_pct).filter(isNumber);
      const powers = npus.map((n) => n.power_w).filter(isNumber);
      Object.assign(this.figures, {
        npus: this.cards.size,
        util: utils.length ? sum(utils) / utils.length : null,
        memoryUsed: memory.some(([used]) => isNumber(used)) ? sum(memory.map(([used]) => used)) : null,
        memoryTotal: sum(memory.map(([, total]) => total)) || this.figures.memoryTotal,
        power: powers.length ? sum(powers) : null,
      });
      this.showFigures();
    }
    dashboard.npuChart.pushLive(this.name, time, npus);
  }

  // A "raised" alert adds to the node's open ones, a "resolved" one removes it (an acknowledged alert stays
  // open until its condition goes away).
  applyAlert(message) {
    const alert = message.alert || {};
    if (!isNumber(alert.id)) return;
    if (message.event === "resolved" || alert.resolved_at) {
      this.alertIds.delete(alert.id);
      dashboard.resolvedAlerts.add(alert.id);
    } else if (!dashboard.resolvedAlerts.has(alert.id)) {
      this.alertIds.add(alert.id);
      dashboard.alertsRaised?.add(alert.id);
    }
    this.showFigures();
  }

  // The open alerts fetched after a (re)subscription, with those raised meanwhile (their messages may have
  // come before the answer) and without those resolved meanwhile.
  setAlerts(ids, raisedMeanwhile) {
    const open = new Set(ids);
    for (const id of this.alertIds) if (raisedMeanwhile.has(id)) open.add(id);
    for (const id of dashboard.resolvedAlerts) open.delete(id);
    this.alertIds = open;
    this.showFigures();
  }

  applyStatus(status) {
    if (!status || status === this.status) return;
    this.status = status;
    this.section.dataset.status = status;
    const colour = labels.colours.node_status[status] || "offline";
    for (const badge of [this.head.status, this.row.status]) {
      setStatus(badge, colour);
      setText(badge, labels.node_status[status] || status);
    }
    setStatus(this.section, colour);
    for (const card of this.cards.values()) {
      if (card.latest?.health !== undefined) card.showHealth(card.latest.health);
      else if (!this.online) card.showHealth(null);
    }
  }

  needsAttention() {
    if (!this.online || this.section.classList.contains("is-stale") || this.alertIds.size > 0) return true;
    for (const card of this.cards.values()) {
      if (card.element._status === "alarm" || card.element._status === "warning") return true;
    }
    return false;
  }

  showFigures() {
    const f = this.figures;
    setText(this.row.npus, formatNumber(f.npus));
    setText(this.row.util, formatPercent(f.util));
    setText(this.row.memory, memoryText(f.memoryUsed, f.memoryTotal));
    setWidth(this.row["memory-bar"], isNumber(f.memoryUsed) && f.memoryTotal ? (100 * f.memoryUsed) / f.memoryTotal : 0);
    setText(this.row.power, formatPower(f.power));
    setText(this.row.alerts, formatNumber(this.alertIds.size));
    if (this.row.alerts) setStatus(this.row.alerts, this.alertIds.size > 0 ? "alarm" : "ok");
  }

  // Once a second: a node that is online but sends no frames says so, and its figures fade.
  checkStale(now) {
    const silentS = this.lastFrame ? (now - this.lastFrame) / 1000 : Infinity;
    const stale = this.online && this.lastFrame > 0 && silentS > STALE_AFTER_S;
    this.section.classList.toggle("is-stale", stale);
    this.staleText = stale ? interpolate(labels.stale, { seconds: Math.round(silentS) }) : "";
    this.showNote();
  }

  showNote() {
    setText(this.head.note, [this.note, this.staleText].filter(Boolean).join(" · "));
  }
}

// ---------------------------------------------------------------------------------------------------
const dashboard = {
  nodes: new Map(),
  frames: [], // [NodeView, metrics message] waiting for the next flush
  flushTimer: 0,
  backfilling: null,
  lastMessage: 0,
  summary: null, // the last "fleet.summary"
  chipsShown: "",
  resolvedAlerts: new Set(), // ids of alerts seen resolved: a resolved alert never opens again
  alertsRaised: null, // while open alerts are being fetched: ids raised meanwhile
  stats: fields(root.querySelector(".fleet-stats")),
  chips: fields(root.querySelector(".chips-card")),
  connection: root.querySelector("[data-f=connection]"),
  filter: {
    form: root.querySelector(".fleet-filter"),
    text: root.querySelector(".fleet-filter [data-f=filter]"),
    status: root.querySelector(".fleet-filter [data-f=status]"),
    problems: root.querySelector(".fleet-filter [data-f=problems]"),
  },
  npuChart: null,

  // The fleet's figures, counted by the server over every node (not only this page's).
  applySummary(summary) {
    this.summary = summary;
    const nodes = summary.nodes || {};
    const npus = summary.npus || {};
    const live = summary.live || {};
    const alerts = summary.alerts || {};
    setText(this.stats.online, formatNumber(nodes.online));
    setText(this.stats.nodes, formatNumber(nodes.total));
    setText(this.stats.npus, formatNumber(npus.total));
    const unhealthy = npus.unhealthy || 0;
    setText(this.stats.unhealthy, unhealthy ? interpolate(labels.unhealthy, { count: formatNumber(unhealthy) }) : "");
    setStatus(this.stats.unhealthy.closest(".stat"), unhealthy ? "alarm" : "ok");
    setText(this.stats.util, isNumber(live.util_mean) ? formatPercent(live.util_mean) : MISSING);
    setText(this.stats["memory-used"], isNumber(live.memory_used_mb) ? formatBytes(live.memory_used_mb, "MB") : MISSING);
    const memoryTotal = npus.memory_total_mb || live.memory_total_mb;
    setText(this.stats["memory-total"], memoryTotal ? formatBytes(memoryTotal, "MB") : MISSING);
    setText(this.stats.power, isNumber(live.power_w) ? formatFleetPower(live.power_w) : MISSING);
    setText(this.stats.alerts, isNumber(alerts.open) ? formatNumber(alerts.open) : MISSING);
    setStatus(this.stats.alerts.closest(".stat"), alerts.open > 0 ? "alarm" : "ok");
    setText(
      this.chips["node-states"],
      interpolate(labels.node_states, {
        online: formatNumber(nodes.online),
        offline: formatNumber(nodes.offline),
        unknown: formatNumber(nodes.unknown),
        cordoned: formatNumber(nodes.cordoned),
      }),
    );
    this.showChips(summary.chips || []);
  },

  // One row per chip type; rebuilt only when a count changed (a few times a day on a steady fleet).
  showChips(chips) {
    const shown = JSON.stringify(chips.map((c) => [c.chip, c.total, c.free, c.busy, c.unhealthy, c.offline]));
    if (shown === this.chipsShown || !this.chips.chips) return;
    this.chipsShown = shown;
    const rows = chips.map((chip) => {
      const row = document.createElement("tr");
      row.dataset.chip = chip.chip;
      const name = document.createElement("td");
      name.textContent = chip.chip || labels.no_chip_name;
      row.append(name);
      for (const key of ["total", "free", "busy", "unhealthy", "offline"]) {
        const cell = document.createElement("td");
        cell.className = "num";
        cell.textContent = formatNumber(chip[key]);
        row.append(cell);
      }
      return row;
    });
    if (rows.length) this.chips.chips.replaceChildren(...rows);
  },

  onFleet(message) {
    this.heard();
    if (message.type === "fleet.summary") {
      this.applySummary(message);
    } else if (message.type === "node.status") {
      this.nodes.get(message.node)?.applyStatus(message.status);
    }
  },

  onNode(node, message) {
    this.heard();
    if (message.type === "metrics") this.queueFrame(node, message);
    else if (message.type === "node.status") node.applyStatus(message.status);
    else if (message.type === "alert") node.applyAlert(message);
  },

  // Frames from 50 nodes arrive spread over each second; applying each at once would dirty the layout in
  // nearly every animation frame. Applied together every FLUSH_MS, the page lays out twice a second.
  queueFrame(node, message) {
    this.frames.push([node, message]);
    if (!this.flushTimer) this.flushTimer = setTimeout(() => this.flushFrames(), FLUSH_MS);
  },

  flushFrames() {
    this.flushTimer = 0;
    const frames = this.frames;
    this.frames = [];
    for (const [node, message] of frames) node.applyMetrics(message);
  },

  heard() {
    this.lastMessage = performance.now();
  },

  // Typing in the name box narrows this page at once (hidden nodes cost nothing to lay out); Enter, a status
  // or "needs attention" asks the server for every page of nodes that match. With "needs attention" on,
  // this page is also re-checked once a second, so a node that recovers leaves it and one that turns bad
  // shows.
  applyFilter() {
    const text = this.filter.text.value.trim().toLowerCase();
    const problemsOnly = this.filter.problems.checked;
    for (const node of this.nodes.values()) {
      const shown = node.name.toLowerCase().includes(text) && (!problemsOnly || node.needsAttention());
      if (node.section.hidden === !shown) continue;
      node.section.hidden = !shown;
      if (node.rowElement) node.rowElement.hidden = !shown;
    }
  },

  tick() {
    const now = performance.now();
    for (const node of this.nodes.values()) node.checkStale(now);
    if (this.filter.problems.checked) this.applyFilter();
    const silent = this.lastMessage && now - this.lastMessage > STALE_AFTER_S * 1000;
    setStatus(this.connection, silent || !this.lastMessage ? "offline" : "ok");
    setText(
      this.connection,
      !this.lastMessage ? labels.connecting : silent ? labels.reconnecting : labels.live,
    );
  },

  // After every (re)subscription: the latest frame and the last minute of each node, so a network drop
  // leaves no hole in the cards or their sparklines.
  backfill() {
    // Several subscriptions in a row (page start, a flapping network) share one back-fill.
    if (!this.backfilling) this.backfilling = this.fetchMissed().finally(() => (this.backfilling = null));
    return this.backfilling;
  },

  async fetchMissed() {
    this.heard();
    const names = [...this.nodes.keys()];
    if (!names.length) return;
    await Promise.all([this.fetchLatest(names), this.fetchAlerts(names)]);
    const queue = [...this.nodes.values()];
    const worker = async () => {
      while (queue.length) {
        const node = queue.shift();
        const history = await fetchHistory(node.id, "60s", 1);
        if (history.error) {
          if (history.status === 404) return; // the metrics API is not there at all: no point asking again
          continue;
        }
        applyHistory(node, history);
      }
    };
    await Promise.all(Array.from({ length: BACKFILL_PARALLEL }, worker));
  },

  async fetchLatest(names) {
    const query = names.map((name) => `node=${encodeURIComponent(name)}`).join("&");
    const latest = await fetchJson(`${root.dataset.latestUrl}?${query}`);
    for (const [name, message] of Object.entries(latest.nodes || {})) this.nodes.get(name)?.applyMetrics(message);
  },

  // The open alerts of this page's nodes, every page of the answer.
  async fetchAlerts(names) {
    const raised = new Set();
    this.alertsRaised = raised;
    const open = new Map(names.map((name) => [name, []]));
    let url = `${root.dataset.alertsUrl}?open=true&page_size=1000&nodes=${names.map(encodeURIComponent).join(",")}`;
    try {
      while (url) {
        const answer = await fetchJson(url);
        if (answer.error) return; // keep what the page and the live messages said
        for (const alert of answer.results || []) open.get(alert.node)?.push(alert.id);
        url = answer.next;
      }
      for (const [name, ids] of open) this.nodes.get(name)?.setAlerts(ids, raised);
    } finally {
      if (this.alertsRaised === raised) this.alertsRaised = null;
    }
  },
};

export function fetchHistory(nodeId, since, step) {
  return fetchJson(`${root.dataset.historyUrl.replace("{id}", nodeId)}?since=${since}&step=${step}`);
}

// The parsed JSON body, or { error, status } with the API's own `detail` sentence when there is one.
async function fetchJson(url) {
  try {
    const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      return { error: body.detail || `${response.status} ${response.statusText}`, status: response.status };
    }
    return await response.json();
  } catch (error) {
    return { error: String(error), status: 0 };
  }
}

function lastPresent(values) {
  for (let i = values.length - 1; i >= 0; i--) if (isNumber(values[i])) return values[i];
  return null;
}

function applyHistory(node, history) {
  const times = history.time || [];
  const series = history.series || {};
  for (const key of Object.keys(series)) {
    const match = key.match(/^npu\.(\d+)\.(\d+)\.util$/);
    if (!match) continue;
    const npu = Number(match[1]);
    const chip = Number(match[2]);
    const card = node.card({ npu_id: npu, chip_id: chip });
    card.mergeHistory(times, series[key]);
    if (!card.latest && times.length) {
      // Nothing live yet: show the newest stored figures rather than dashes (health waits for a frame).
      const value = (name) => lastPresent(series[seriesKey(npu, chip, name)] || []);
      card.apply({
        aicore_pct: value("util"),
        hbm_used_mb: value("hbm_used"),
        power_w: value("power"),
        temp_c: value("temp"),
      });
      card.latest = null;
    }
  }
}

function start() {
  const rows = new Map([...root.querySelectorAll(".fleet-table tr[data-node]")].map((row) => [row.dataset.node, row]));
  for (const section of root.querySelectorAll(".node-section")) {
    const node = new NodeView(section, rows.get(section.dataset.node));
    dashboard.nodes.set(node.name, node);
  }
  dashboard.npuChart = new NpuChart(document.getElementById("npu-drawer"), {
    labels,
    history: (nodeName, since, step) => fetchHistory(dashboard.nodes.get(nodeName).id, since, step),
  });
  root.querySelector("#npu-nodes").addEventListener("click", (event) => openFromCard(event.target));
  root.querySelector("#npu-nodes").addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      if (openFromCard(event.target)) event.preventDefault();
    }
  });
  // Only the nodes on this page: the server checks each group against what the viewer may see.
  listen("fleet", (message) => dashboard.onFleet(message));
  for (const node of dashboard.nodes.values()) listen(`node.${node.name}`, (message) => dashboard.onNode(node, message));
  onSubscribed(() => dashboard.backfill());
  const filter = dashboard.filter;
  filter.text.addEventListener("input", () => dashboard.applyFilter());
  for (const input of [filter.status, filter.problems]) input.addEventListener("change", () => filter.form.requestSubmit());
  dashboard.applySummary(JSON.parse(document.getElementById("fleet-summary").textContent));
  dashboard.applyFilter();
  dashboard.tick();
  setInterval(() => dashboard.tick(), 1000);
  openFromHash();
}

function openFromCard(target) {
  const element = target.closest?.(".npu-card");
  if (!element) return false;
  const node = dashboard.nodes.get(element.closest(".node-section").dataset.node);
  const card = node.cards.get(`${element.dataset.npu}/${element.dataset.chip}`);
  dashboard.npuChart.open(node.name, card.npu, card.chip, {
    title: `${node.name} · ${element.querySelector("[data-f=label]").textContent}`,
    latest: card.latest,
    opener: element,
  });
  return true;
}

// #npu=<node>/<npu>/<chip> opens that NPU's charts: a link an admin can paste to a colleague.
function openFromHash() {
  const match = location.hash.match(/^#npu=([^/]+)\/(\d+)\/(\d+)$/);
  if (!match) return;
  const element = dashboard.nodes
    .get(decodeURIComponent(match[1]))
    ?.section.querySelector(`.npu-card[data-npu="${match[2]}"][data-chip="${match[3]}"]`);
  if (element) openFromCard(element);
}

if (window.uPlot) start();
else window.addEventListener("load", start, { once: true }); // uPlot is a deferred classic script
