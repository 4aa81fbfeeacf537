// Small uPlot wrappers for the deployment pages: colours from the theme variables (rebuilt when the theme
// changes), widths that follow the box, locale formatting from format.js. uPlot is the global from
// static/vendor/uplot/uPlot.iife.min.js, loaded by the page before its modules.
import { formatDateTime, MISSING } from "./format.js";

const charts = new Set();
const WHOLE_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200];

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
 * legend; whole: the y axis counts things, so its ticks are whole numbers.
 * Returns { update(data), rebuild(), resize() }.
 */
export function lineChart(
  box,
  { series, x = "time", xLabel = "", height = 180, yRange = null, whole = false, format = (v) => String(v) },
) {
  let plot = null;
  let data = [[], ...series.map(() => [])];

  function build() {
    if (plot) plot.destroy();
    const timeAxis = x === "time";
    const xValues = timeAxis
      ? (u, ticks) => ticks.map((t) => formatDateTime(t * 1000, { timeStyle: "medium" }))
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
            // Whole seconds only, so two ticks never print the same clock time.
            ...(timeAxis ? { incrs: TIME_STEPS } : { splits: () => x.map((_, i) => i) }),
          }),
          axis({
            size: 56,
            values: (u, ticks) => ticks.map((t) => format(t)),
            ...(whole ? { incrs: WHOLE_STEPS } : {}), // counts: no 0.5 request ticks
          }),
        ],
      },
      data,
      box,
    );
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
