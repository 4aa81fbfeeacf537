// Small uPlot wrappers for the deployment pages: colours from the theme variables (rebuilt when the theme
// changes), widths that follow the box, locale formatting from format.js. uPlot is the global from
// static/vendor/uplot/uPlot.iife.min.js, loaded by the page before its modules.
import { formatCount, formatDateTime, formatNumber, MISSING } from "./format.js";

const charts = new Set();
const WHOLE_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 1e5, 2e5, 5e5, 1e6];
// Tick steps in seconds: whole seconds, minutes and hours, so two ticks never print the same clock time.
export const TIME_STEPS = [
  1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800,
];
const DAY_S = 86400;

/** Fraction digits a tick step needs: 0.25 → 2, 0.5 → 1, 20 → 0 (so 0.25 and 0.5 do not both read "0.3"). */
function stepDigits(step) {
  const text = String(Number(Number(step).toPrecision(6)));
  return text.includes(".") ? Math.min(text.split(".")[1].length, 6) : 0;
}

/** Y tick labels: as many decimals as the step needs; big counts shortened ("113.0 M"). */
export function tickNumber(value, step) {
  if (Math.abs(value) >= 1e5) return formatCount(value);
  return formatNumber(value, { maximumFractionDigits: stepDigits(step), minimumFractionDigits: stepDigits(step) });
}

/**
 * uPlot `values` for a time axis (epoch seconds): the clock to the second when ticks are seconds apart, to
 * the minute when minutes apart, the date once ticks are days apart or the axis spans more than a day.
 */
export function timeTicks(u, ticks, _axisIndex, _space, step) {
  if (!ticks.length) return [];
  const span = ticks[ticks.length - 1] - ticks[0];
  let shape = { hour: "2-digit", minute: "2-digit" };
  if (step % 60 !== 0) shape = { hour: "2-digit", minute: "2-digit", second: "2-digit" };
  else if (step % DAY_S === 0) shape = { month: "numeric", day: "numeric" };
  else if (span >= DAY_S) shape = { month: "numeric", day: "numeric", hour: "2-digit", minute: "2-digit" };
  return ticks.map((t) => formatDateTime(t * 1000, shape));
}

const stepFor = (span, steps, ticks) => steps.find((s) => span / s <= ticks) ?? steps[steps.length - 1];

/**
 * A y range whose top is a tick at or above the data (the axis never tops out below the line), and the
 * matching uPlot `splits`: ticks every step from the bottom to that top, the step the range was rounded to.
 */
export function niceRange(low, high, steps, { min = null, max = null, ticks = 4 } = {}) {
  const bottom = min ?? Math.min(0, low ?? 0);
  const top = Math.max(Number.isFinite(high) && high > bottom ? high : bottom + steps[0], max ?? -Infinity);
  const step = stepFor(top - bottom, steps, ticks);
  return [bottom, bottom + Math.ceil((top - bottom) / step) * step];
}

export function niceSplits(steps, ticks = 4) {
  return (_u, _axis, min, max) => {
    const step = stepFor(max - min, steps, ticks);
    const count = Math.round((max - min) / step);
    return Array.from({ length: count + 1 }, (_, i) => min + i * step);
  };
}

export function themeColour(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function axis(extra = {}) {
  return {
    stroke: themeColour("--muted"),
    grid: { stroke: themeColour("--border"), width: 1 },
    ticks: { stroke: themeColour("--border") },
    ...extra,
  };
}

/**
 * A chart whose x axis is `x`: "time" (epoch seconds, clock labels) or a list of category labels.
 * series: [{ label, colour (CSS variable name), format(v) → text, dash }]; xLabel names the x values in the
 * legend; whole: the y axis counts things, so its ticks are whole numbers. Y ticks get as many decimals as
 * their step needs (tickNumber) unless tickFormat(v) says otherwise (a percentage, a unit).
 * Returns { update(data), rebuild(), resize() }.
 */
export function lineChart(
  box,
  {
    series,
    x = "time",
    xLabel = "",
    height = 180,
    yRange = null,
    whole = false,
    format = (v) => String(v),
    tickFormat = null,
  },
) {
  let plot = null;
  let data = [[], ...series.map(() => [])];

  function build() {
    if (plot) plot.destroy();
    const timeAxis = x === "time";
    const xValues = timeAxis
      ? timeTicks
      : (u, ticks) => ticks.map((t) => (Number.isInteger(t) && x[t] !== undefined ? x[t] : ""));
    plot = new uPlot(
      {
        width: Math.max(box.clientWidth, 200),
        height,
        scales: {
          // Categories get half a step of room at each end so the first and last points are not on the frame.
          x: timeAxis ? { time: false } : { time: false, range: (u, min, max) => [min - 0.5, max + 0.5] },
          y: yRange ? { range: yRange } : { auto: true },
        },
        series: [
          {
            label: xLabel,
            value: (u, v) =>
              v === null || v === undefined ? MISSING : timeAxis ? formatDateTime(v * 1000) : (x[v] ?? MISSING),
          },
          ...series.map((s) => ({
            label: s.label,
            stroke: themeColour(s.colour),
            width: 1.5,
            dash: s.dash,
            spanGaps: true,
            points: { show: !timeAxis },
            value: (u, v) => (v === null || v === undefined ? MISSING : (s.format || format)(v)),
          })),
        ],
        axes: [
          axis({
            values: xValues,
            space: 70,
            // Categories: one tick per category, never a repeated label between two of them.
            ...(timeAxis ? { incrs: TIME_STEPS } : { splits: () => x.map((_, i) => i) }),
          }),
          axis({
            size: 64,
            values: (u, ticks, _axis, _space, step) => ticks.map((t) => (tickFormat ? tickFormat(t) : tickNumber(t, step))),
            ...(whole ? { incrs: WHOLE_STEPS } : {}), // counts: no 0.5 request ticks
          }),
        ],
      },
      data,
      box,
    );
    box.uplot = plot; // tests and the console reach a chart from its box
  }

  build();
  const chart = {
    update(next) {
      data = next;
      plot.setData(data);
    },
    rebuild: build,
    resize() {
      plot.setSize({ width: Math.max(box.clientWidth, 200), height });
    },
  };
  charts.add(chart);
  return chart;
}

// Theme switches change the CSS variables; window resizes change the boxes.
new MutationObserver(() => charts.forEach((c) => c.rebuild())).observe(document.documentElement, {
  attributes: true,
  attributeFilter: ["data-theme"],
});
let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => charts.forEach((c) => c.resize()), 150);
});
