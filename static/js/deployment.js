// The deployment page, live: status and start-up stages, the engine log, engine metrics charted with
// uPlot, the NPUs' figures, failure findings; copy buttons and confirm dialogs for the actions.
// Groups: deployment.<name> (deployment.status, deployment.logs, engine.metrics), operation.<launch id>
// (start-up progress) and node.<name> ("metrics" of the NPUs this deployment holds).
import "./copy.js";
import { lineChart } from "./charts.js";
import { colour, label as choiceLabel, SETTLED } from "./choices.js";
import { appendLines, EventLog } from "./event_log.js";
import { formatNumber, formatPercent, formatPower, formatTemperature, MISSING } from "./format.js";
import { listen, onSubscribed } from "./live.js";

const config = JSON.parse(document.getElementById("deployment-config").textContent);
const root = document.getElementById("deployment");
const field = (name) => root.querySelector(`[data-field=${name}]`);
const get = (url) => fetch(url, { credentials: "same-origin" }).then((r) => (r.ok ? r.json() : null));

// ---- status, start-up stages, findings ------------------------------------------------------------
let launchOperation = null;
let movedSinceLoad = false; // whether this page has seen the deployment in a transition (starting, stopping…)

function showStatus(message) {
  const status = message.status;
  root.dataset.status = status;
  const badge = field("status");
  badge.className = `status status-${colour("deployment", status)}`;
  badge.textContent = config.stateLabels[status] || status;
  if (message.reason !== undefined) {
    // The socket carries the English reason; the API gives it in this page's language.
    if (!message.reason) showReason("");
    else get(config.detailUrl).then((detail) => showReason((detail && detail.reason_display) || message.reason));
  }
  if (message.restart_count !== undefined) field("restarts").textContent = message.restart_count;
  if (message.desired_state !== undefined) {
    field("desired").textContent = config.stateLabels[message.desired_state] || message.desired_state;
  }
  if (message.endpoint) field("endpoint").textContent = message.endpoint;
  field("startup").hidden = status !== "starting";
  // Only the actions that make sense in this state are offered (Start when stopped, Stop when running…).
  document.querySelectorAll("[data-when]").forEach((button) => {
    button.hidden = !button.dataset.when.split(" ").includes(status);
  });
  document.querySelectorAll("[data-testid=run-benchmark]").forEach((b) => (b.disabled = status !== "running"));
  if (status === "deleted") setTimeout(() => location.assign(".."), 1500);
  // "… is starting", "Stopping …": true until the deployment settles, then gone without a reload. A restart's
  // first frames still say Running (the old engine serves on): its message waits until it moved and settled.
  if (!SETTLED.has(status)) movedSinceLoad = true;
  else {
    document.querySelectorAll(".message[data-message~=transition]").forEach((m) => {
      if (movedSinceLoad || !m.matches("[data-message~=restart]")) m.remove();
    });
  }
  // Starting, or in trouble (an amber or red state): the stages and findings may have changed.
  if (status === "starting" || ["warning", "alarm"].includes(colour("deployment", status))) refreshDetail();
}

function showReason(text) {
  field("reason").textContent = text;
  field("reason").hidden = !text;
}

async function refreshDetail() {
  const [detail] = await Promise.all([get(config.detailUrl), refreshFindings()]);
  if (detail && detail.status === "starting" && detail.operation && detail.operation !== launchOperation) {
    followLaunch(detail.operation);
  }
}

// The findings box comes rendered from the server: translated, with the hint that fits this deployment.
async function refreshFindings() {
  const response = await fetch(config.findingsUrl, { credentials: "same-origin" });
  if (!response.ok) return;
  const box = document.createElement("template");
  box.innerHTML = (await response.text()).trim();
  const fresh = box.content.querySelector("[data-field=findings]");
  if (fresh) field("findings").replaceWith(fresh);
}

function showStage(percent, stageKey, stageText) {
  stageKey = stageKey || config.stageKeys?.[stageText] || null; // shown in the page's language, by its key
  if (percent !== undefined && percent !== null) {
    field("progress-bar").style.width = `${percent}%`;
    field("progress").textContent = Math.round(percent);
    root.querySelector("[role=progressbar]").setAttribute("aria-valuenow", Math.round(percent));
  }
  if (stageText) field("stage").textContent = stageText;
  const keys = Object.keys(config.stageTitles);
  const current = keys.indexOf(stageKey);
  if (current < 0) return;
  field("stages")
    .querySelectorAll("li")
    .forEach((item, index) => {
      item.classList.toggle("is-done", index < current || stageKey === "ready");
      item.classList.toggle("is-current", index === current && stageKey !== "ready");
    });
  if (stageKey) field("stage").textContent = config.stageTitles[stageKey] || stageText;
}

function followLaunch(operationId) {
  launchOperation = operationId;
  const url = config.operationUrl.replace(/0{8}-0{4}-0{4}-0{4}-0{12}/, operationId);
  get(url).then((operation) => operation && showStage(operation.progress, null, operation.stage));
  listen(`operation.${operationId}`, (message) => {
    if (message.type !== "operation.events") return;
    for (const event of message.events) {
      if (event.kind === "progress") showStage(event.payload.percent, event.payload.stage_key, event.payload.stage);
    }
  });
}

// ---- engine log -------------------------------------------------------------------------------------
// The panel's own probes' access lines; PROBE_LINE_REGEX in panel/deployments/models.py is its twin.
const PROBE_LINE = /"(?:GET|HEAD) \/(?:health|ping|metrics)(?:\?[^ "]*)? HTTP\/[\d.]+" \d{3}/;
const logBox = field("log");
const follow = field("follow");
const engineLog = new EventLog({
  lastSeq: Number(logBox.dataset.startSeq || 0),
  fetchPage: async (after) => {
    const body = await get(`${config.logsUrl}?after_seq=${after}&probes=true`);
    if (!body) return null;
    const items = body.results;
    return { items, more: items.length > 0 && items[items.length - 1].seq < body.last_seq };
  },
  render: (lines) => {
    const probe = (l) => PROBE_LINE.test(l.line);
    countProbeLines(lines.filter(probe).length);
    appendLines(
      logBox,
      lines.map((l) => ({
        seq: l.seq,
        text: config.nodes.length > 1 ? `${l.node}  ${l.line}` : l.line,
        className: probe(l) ? "log-probe" : "",
      })),
      { follow: () => follow.checked },
    );
  },
});

// The panel's own probes (GET /health and /metrics every few seconds) would bury what the engine says: they
// are hidden and counted, and a switch shows them; the download keeps every line.
function countProbeLines(count) {
  if (!count) return;
  const counter = field("probe-lines");
  counter.dataset.count = Number(counter.dataset.count || 0) + count;
  counter.textContent = config.labels.probeLines.replace("{n}", formatNumber(counter.dataset.count, { maximumFractionDigits: 0 }));
  field("probe-toggle").hidden = false;
}
field("show-probes").addEventListener("change", (event) => logBox.classList.toggle("show-probes", event.target.checked));

// ---- engine metrics -----------------------------------------------------------------------------------
const WINDOW_S = 3600; // the last hour, as the history API back-fills it
const MAX_POINTS = 3600;
const series = { time: [], running: [], waiting: [], prompt: [], gen: [], ttft50: [], ttft95: [], tpot50: [], tpot95: [], kv: [] };
const FIGURES = Object.keys(series).filter((key) => key !== "time");
const ms = (seconds) => (seconds === null || seconds === undefined ? null : seconds * 1000);
const whole = (v) => formatNumber(v, { maximumFractionDigits: 0 });
const oneDecimal = (v) => formatNumber(v, { maximumFractionDigits: 1 });
const chartBox = (name) => document.querySelector(`[data-chart=${name}]`);
const label = config.labels;
const charts = {
  requests: lineChart(chartBox("requests"), {
    format: whole,
    whole: true,
    xLabel: label.time,
    series: [
      { label: label.running, colour: "--running" },
      { label: label.waiting, colour: "--warning" },
    ],
  }),
  tokens: lineChart(chartBox("tokens"), {
    format: oneDecimal,
    xLabel: label.time,
    series: [
      { label: label.prompt, colour: "--mem-weights" },
      { label: label.generation, colour: "--mem-kv" },
    ],
  }),
  latency: lineChart(chartBox("latency"), {
    format: oneDecimal,
    xLabel: label.time,
    series: [
      { label: "TTFT p50", colour: "--running" },
      { label: "TTFT p95", colour: "--running", dash: [4, 4] },
      { label: "TPOT p50", colour: "--mem-kv" },
      { label: "TPOT p95", colour: "--mem-kv", dash: [4, 4] },
    ],
  }),
  kv: lineChart(chartBox("kv"), {
    format: (v) => formatPercent(v),
    tickFormat: (v) => formatPercent(v),
    xLabel: label.time,
    yRange: [0, 100],
    series: [{ label: label.kv, colour: "--mem-kv" }],
  }),
};

function kvPercent(usage) {
  if (usage === null || usage === undefined) return null;
  return usage <= 1 ? usage * 100 : usage; // vLLM exports a fraction; accept a percentage too
}

function pick(metrics, windowed, cumulative) {
  const value = metrics[windowed];
  return value === null || value === undefined ? metrics[cumulative] : value;
}

function figuresOf(metrics) {
  return {
    running: metrics.running,
    waiting: metrics.waiting,
    kv: kvPercent(metrics.kv_cache_usage),
    prompt: metrics.prompt_tokens_per_s,
    gen: metrics.generation_tokens_per_s,
    ttft50: ms(pick(metrics, "window_ttft_p50", "ttft_p50")),
    ttft95: ms(pick(metrics, "window_ttft_p95", "ttft_p95")),
    tpot50: ms(pick(metrics, "window_tpot_p50", "tpot_p50")),
    tpot95: ms(pick(metrics, "window_tpot_p95", "tpot_p95")),
  };
}

function addPoint(figures, seconds) {
  if (series.time.length && seconds <= series.time[series.time.length - 1]) return false; // seen already
  series.time.push(seconds);
  for (const key of FIGURES) series[key].push(figures[key] ?? null);
  while (series.time.length > MAX_POINTS || series.time[0] < seconds - WINDOW_S) {
    for (const list of Object.values(series)) list.shift();
  }
  return true;
}

function drawCharts() {
  charts.requests.update([series.time, series.running, series.waiting]);
  charts.tokens.update([series.time, series.prompt, series.gen]);
  charts.latency.update([series.time, series.ttft50, series.ttft95, series.tpot50, series.tpot95]);
  charts.kv.update([series.time, series.kv]);
  root.dataset.metricPoints = series.time.length;
}

function showMetrics(metrics, time) {
  if (!metrics || !Object.keys(metrics).length) return;
  const figures = figuresOf(metrics);
  const stat = (name, text) => (root.querySelector(`[data-metric=${name}]`).textContent = text);
  stat("running", whole(figures.running));
  stat("waiting", whole(figures.waiting));
  stat("kv", formatPercent(figures.kv, 1));
  stat("prompt_tps", oneDecimal(figures.prompt));
  stat("gen_tps", oneDecimal(figures.gen));
  stat("ttft", `${whole(figures.ttft50)} / ${whole(figures.ttft95)}`);
  stat("tpot", `${oneDecimal(figures.tpot50)} / ${oneDecimal(figures.tpot95)}`);
  const hitRate = metrics.prefix_cache_hit_rate; // this engine's, since it started (vllm:prefix_cache_*)
  stat("prefix_hit", formatPercent(hitRate === null || hitRate === undefined ? null : hitRate * 100, 1));
  const seconds = time ? Date.parse(time) / 1000 : Date.now() / 1000;
  if (!addPoint(figures, seconds)) return;
  drawCharts();
  const stamp = field("metrics-time");
  stamp.textContent = new Date(seconds * 1000).toLocaleTimeString(document.documentElement.lang || undefined);
}

// The last hour from the panel's store, so the charts do not start empty on every load. Points the socket
// brought meanwhile are newer and stay; back-filled ones go in front of them.
async function backfillMetrics() {
  const body = await get(config.metricsHistoryUrl);
  if (!body || !body.points.length) return;
  const live = series.time.map((time, i) => [time, Object.fromEntries(FIGURES.map((k) => [k, series[k][i]]))]);
  for (const list of Object.values(series)) list.length = 0;
  for (const point of body.points) addPoint(figuresOf(point.metrics), point.time);
  for (const [time, figures] of live) addPoint(figures, time);
  drawCharts();
}

// ---- NPUs ---------------------------------------------------------------------------------------------

function showNpus(message) {
  for (const npu of message.npus || []) {
    const row = document.querySelector(`tr[data-node="${message.node}"][data-npu="${npu.npu_id}/${npu.chip_id}"]`);
    if (!row) continue;
    const cell = (name) => row.querySelector(`[data-live=${name}]`);
    cell("aicore").textContent = formatPercent(npu.aicore_pct);
    const used = npu.hbm_used_mb ?? npu.memory_used_mb;
    const total = npu.hbm_total_mb ?? npu.memory_total_mb;
    const share = used !== null && used !== undefined && total ? (100 * used) / total : null;
    cell("hbm-bar").style.width = `${share ?? 0}%`;
    cell("hbm").textContent =
      share === null ? MISSING : `${formatNumber(used / 1024)} / ${formatNumber(total / 1024, { maximumFractionDigits: 0 })} GiB`;
    cell("power").textContent = formatPower(npu.power_w);
    cell("temp").textContent = formatTemperature(npu.temp_c);
    if (npu.health) {
      const badge = cell("health").querySelector(".status");
      badge.className = `status status-${colour("npu_health", npu.health)}`;
      badge.textContent = choiceLabel("npu_health", npu.health);
    }
  }
}

// ---- confirm dialogs --------------------------------------------------------------------------------
const dialog = document.querySelector("[data-dialog]");
if (dialog) {
  const texts = JSON.parse(document.getElementById("confirm-texts").textContent);
  document.querySelectorAll("[data-confirm]").forEach((button) =>
    button.addEventListener("click", () => {
      const action = texts[button.dataset.confirm];
      dialog.querySelector("[data-dialog-text]").textContent = action.text;
      dialog.querySelector("[data-dialog-form]").action = action.url;
      const ok = dialog.querySelector("[data-dialog-ok]");
      ok.className = button.dataset.confirm === "delete" ? "btn btn-danger" : "btn btn-primary";
      ok.textContent = button.textContent;
      dialog.showModal();
    }),
  );
  dialog.querySelector("[data-dialog-cancel]").addEventListener("click", () => dialog.close());
}

// ---- wiring -------------------------------------------------------------------------------------------
listen(`deployment.${config.name}`, (message) => {
  if (message.type === "deployment.status") showStatus(message);
  else if (message.type === "deployment.logs") engineLog.apply(message.lines);
  else if (message.type === "engine.metrics") showMetrics(message.metrics, message.time);
});
for (const node of config.nodes) {
  listen(`node.${node}`, (message) => {
    if (message.type === "metrics") showNpus(message);
  });
}
if (config.status === "starting" && config.launchOperation) followLaunch(config.launchOperation);
if (config.stageKey) showStage(undefined, config.stageKey);
showMetrics(config.metrics, config.metricsAt);
onSubscribed(async () => {
  engineLog.backfill();
  backfillMetrics();
  const detail = await get(config.detailUrl);
  if (detail) {
    showStatus({ ...detail, status: detail.status });
    if (detail.metrics) showMetrics(detail.metrics, detail.metrics_at);
  }
});
