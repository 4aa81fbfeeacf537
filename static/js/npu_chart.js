// The NPU drawer: uPlot charts of one NPU's AI Core utilisation, HBM, power and temperature.
// "Live" shows the last 5 minutes (history, then each frame appended); 1 h / 24 h / 7 d come from the
// metrics API (GET /api/v1/nodes/<id>/metrics/?since=…&step=…), downsampled by the server to `step`.
//
//   const chart = new NpuChart(dialogElement, { labels, history: (node, since, step) => fetchHistory(...) });
//   chart.open("sim-a2", 3, 0, { title, latest, opener });   // from a card click; latest = its last frame
//   chart.pushLive("sim-a2", epochSeconds, frame.npus);      // every metrics frame of every node
//
// uPlot (static/vendor/uplot) is loaded as a classic script before the page's modules: window.uPlot.
import { niceRange, niceSplits, TIME_STEPS, timeTicks } from "./charts.js";
import { MISSING, formatBytes, formatPercent, formatPower, formatTemperature } from "./format.js";

const LIVE_WINDOW_S = 300;
// About 360-720 points per chart whatever the range: enough detail, cheap to fetch and draw.
const RANGES = {
  live: { since: "5m", step: 1 },
  "1h": { since: "1h", step: 10 },
  "24h": { since: "24h", step: 120 },
  "7d": { since: "7d", step: 900 },
};
const DECIMAL_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000];
// HBM in MB (npu-smi's MiB): ticks on whole binary sizes, so they read 16 GiB, 32 GiB … rather than 19 GiB.
const MB_STEPS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144];
const METRICS = [
  {
    name: "util",
    label: "chart_util",
    format: formatPercent,
    min: 0,
    max: 100,
    steps: DECIMAL_STEPS,
    read: (n) => n.aicore_pct,
  },
  {
    name: "hbm_used",
    label: "chart_hbm",
    format: (v) => formatBytes(v, "MB"),
    min: 0,
    steps: MB_STEPS,
    read: (n) => (n.hbm_total_mb ? n.hbm_used_mb : n.memory_used_mb),
  },
  { name: "power", label: "chart_power", format: formatPower, min: 0, steps: DECIMAL_STEPS, read: (n) => n.power_w },
  { name: "temp", label: "chart_temp", format: formatTemperature, min: 0, steps: DECIMAL_STEPS, read: (n) => n.temp_c },
];

/** Seconds since the epoch from what frames and the API carry: epoch seconds, or an ISO 8601 string. */
export function epochSeconds(time) {
  if (typeof time === "number") return time;
  const parsed = Date.parse(time);
  return Number.isNaN(parsed) ? Date.now() / 1000 : parsed / 1000;
}

/** The history API's series name for one NPU chip's metric: npu.<npu_id>.<chip_id>.<metric>. */
export function seriesKey(npu, chip, metric) {
  return `npu.${npu}.${chip}.${metric}`;
}

function cssVar(name, fallback) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
}

function translucent(colour, alpha) {
  const hex = colour.match(/^#([0-9a-f]{6})$/i);
  if (!hex) return undefined; // no fill rather than a wrong one
  const n = parseInt(hex[1], 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
}

/** Fills Django-style "%(name)s" placeholders of a translated string. */
export function interpolate(text, values) {
  return text.replace(/%\((\w+)\)s/g, (_, name) => String(values[name] ?? ""));
}

export class NpuChart {
  constructor(dialog, { labels, history }) {
    this.dialog = dialog;
    this.labels = labels;
    this.history = history;
    this.range = "live";
    this.target = null; // { node, npu, chip }
    this.data = null; // [times, util, hbm, power, temp]
    this.plots = [];
    this.loading = 0;
    this.field = (name) => dialog.querySelector(`[data-f=${name}]`);
    this.charts = this.field("charts");
    dialog.querySelector("[data-close]").addEventListener("click", () => dialog.close());
    dialog.addEventListener("click", (event) => {
      if (event.target === dialog) dialog.close(); // a click on the backdrop
    });
    dialog.addEventListener("close", () => this.closed());
    for (const button of dialog.querySelectorAll("[data-range]")) {
      button.addEventListener("click", () => this.setRange(button.dataset.range));
    }
    document.addEventListener("panel:themechange", () => this.target && this.render());
    this.resizer = new ResizeObserver(() => this.fit());
    this.resizer.observe(this.charts);
  }

  isShowing(node, npu, chip) {
    const t = this.target;
    return Boolean(t && t.node === node && t.npu === npu && t.chip === chip);
  }

  open(node, npu, chip, { title, latest, opener }) {
    this.target = { node, npu, chip };
    this.opener = opener;
    this.field("title").textContent = title;
    this.showFacts(latest);
    history.replaceState(null, "", `#npu=${encodeURIComponent(node)}/${npu}/${chip}`);
    if (!this.dialog.open) this.dialog.showModal();
    this.setRange("live");
  }

  closed() {
    this.target = null;
    this.destroyPlots();
    if (location.hash.startsWith("#npu=")) history.replaceState(null, "", location.pathname + location.search);
    this.opener?.focus();
  }

  showFacts(npu) {
    const facts = this.field("facts");
    facts.replaceChildren();
    if (!npu) return;
    const rows = [
      [this.labels.health_label, this.labels.health[npu.health] || npu.health],
      [this.labels.chip_label, npu.name],
      [this.labels.deployment_label, npu.deployment],
      [
        this.labels.processes_label,
        (npu.processes || []).map((p) => `${p.name || "?"} (${p.pid}) ${formatBytes(p.memory_mb, "MB")}`).join(", "),
      ],
    ];
    for (const [term, value] of rows) {
      const dt = document.createElement("dt");
      dt.textContent = term;
      const dd = document.createElement("dd");
      dd.textContent = value || MISSING;
      facts.append(dt, dd);
    }
  }

  async setRange(range) {
    this.range = range;
    for (const button of this.dialog.querySelectorAll("[data-range]")) {
      button.setAttribute("aria-pressed", String(button.dataset.range === range));
    }
    const target = this.target;
    const ticket = ++this.loading;
    this.showMessage(this.labels.loading);
    const { since, step } = RANGES[range];
    const answer = await this.history(target.node, since, step);
    if (ticket !== this.loading || !this.isShowing(target.node, target.npu, target.chip)) return; // superseded
    if (answer.error) {
      this.showMessage(interpolate(this.labels.no_history, { reason: answer.error }));
      this.data = [[], [], [], [], []]; // live frames still fill the chart
    } else {
      this.showMessage("");
      const times = answer.time || [];
      const series = answer.series || {};
      this.data = [
        times.slice(),
        ...METRICS.map((m) => (series[seriesKey(target.npu, target.chip, m.name)] || times.map(() => null)).slice()),
      ];
    }
    this.render();
  }

  /** A frame of `node`: when this NPU is open in live mode, its figures join the chart. */
  pushLive(node, time, npus) {
    const t = this.target;
    if (!t || t.node !== node || this.range !== "live" || !this.data) return;
    const npu = npus.find((n) => n.npu_id === t.npu && (n.chip_id || 0) === t.chip);
    if (!npu) return;
    const times = this.data[0];
    if (times.length && time <= times[times.length - 1]) return;
    times.push(time);
    METRICS.forEach((metric, i) => this.data[i + 1].push(metric.read(npu) ?? null));
    const cutoff = time - LIVE_WINDOW_S;
    while (times.length && times[0] < cutoff) this.data.forEach((column) => column.shift());
    this.showFacts(npu);
    for (const plot of this.plots) plot.setData([this.data[0], this.data[plot.metricIndex + 1]]);
  }

  showMessage(text) {
    const message = this.field("message");
    message.textContent = text;
    message.hidden = !text;
  }

  destroyPlots() {
    for (const plot of this.plots) plot.destroy();
    this.plots = [];
    this.charts.replaceChildren();
  }

  render() {
    this.destroyPlots();
    if (!this.data || !window.uPlot) return;
    const line = cssVar("--spark", "#0969da");
    const muted = cssVar("--muted", "#5c6672");
    const grid = cssVar("--border", "#d5d9e0");
    const width = this.charts.clientWidth || 640;
    const sync = window.uPlot.sync(`npu-${this.target.node}`);
    METRICS.forEach((metric, index) => {
      const holder = document.createElement("div");
      holder.className = "chart";
      holder.dataset.metric = metric.name;
      this.charts.append(holder);
      const axis = { stroke: muted, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
      const plot = new window.uPlot(
        {
          width,
          height: 120,
          cursor: { sync: { key: sync.key }, drag: { x: false, y: false } },
          scales: {
            // The top tick sits at or above the highest point, on a step of the axis' own.
            y: { range: (_u, low, high) => niceRange(low, high, metric.steps, { min: metric.min, max: metric.max ?? null }) },
          },
          series: [
            {},
            {
              label: this.labels[metric.label],
              stroke: line,
              width: 1.5,
              fill: translucent(line, 0.12),
              spanGaps: false,
              points: { show: false },
              value: (_u, v) => (v === null || v === undefined ? MISSING : metric.format(v)),
            },
          ],
          axes: [
            { ...axis, space: 70, incrs: TIME_STEPS, values: timeTicks },
            {
              ...axis,
              size: 64,
              splits: niceSplits(metric.steps),
              values: (_u, splits) => splits.map((v) => metric.format(v)),
            },
          ],
        },
        [this.data[0], this.data[index + 1]],
        holder,
      );
      plot.metricIndex = index;
      holder.uplot = plot; // tests and the console reach a chart from its box
      this.plots.push(plot);
    });
  }

  fit() {
    const width = this.charts.clientWidth;
    for (const plot of this.plots) if (width && plot.width !== width) plot.setSize({ width, height: 120 });
  }
}

