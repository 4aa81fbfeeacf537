// The benchmark comparison page: one chart per figure, concurrency on the x axis, one line per run.
import { lineChart } from "./charts.js";
import { formatNumber } from "./format.js";

const runs = JSON.parse(document.getElementById("benchmark-series").textContent);
const labels = JSON.parse(document.getElementById("chart-labels").textContent);
const PALETTE = ["--running", "--mem-weights", "--mem-kv", "--warning", "--ok", "--alarm", "--muted", "--accent"];
const levels = [...new Set(runs.flatMap((run) => run.levels.map((level) => level.concurrency)))].sort((a, b) => a - b);
const inMilliseconds = (key) => key.endsWith("_s") && key !== "output_tokens_per_s";

document.querySelectorAll("[data-bench-chart]").forEach((box) => {
  const key = box.dataset.benchChart;
  const scale = inMilliseconds(key) ? 1000 : 1;
  const data = [
    levels.map((_, index) => index),
    ...runs.map((run) =>
      levels.map((concurrency) => {
        const level = run.levels.find((l) => l.concurrency === concurrency);
        const value = level ? level[key] : null;
        return value === null || value === undefined ? null : value * scale;
      }),
    ),
  ];
  const chart = lineChart(box, {
    x: levels.map(String),
    xLabel: labels.concurrency,
    height: 220,
    format: (v) => formatNumber(v, { maximumFractionDigits: 1 }),
    series: runs.map((run, index) => ({ label: run.label, colour: PALETTE[index % PALETTE.length] })),
  });
  chart.update(data);
});
