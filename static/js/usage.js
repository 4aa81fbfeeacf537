// The usage page's two charts: tokens per bucket (hour or day) for the biggest models and keys, the rest
// summed as "other". The figures come with the page (json_script "usage-series"); uPlot is loaded deferred.
import { lineChart } from "./charts.js";
import { formatCount } from "./format.js";

// Not status colours: a series is a model or a key, never a state.
const PALETTE = ["--mem-weights", "--mem-kv", "--spark", "--meter", "--mem-reserve", "--muted", "--text"];

function draw() {
  const data = JSON.parse(document.getElementById("usage-series").textContent);
  const labels = JSON.parse(document.getElementById("usage-labels").textContent);
  for (const name of ["models", "keys"]) {
    const box = document.querySelector(`[data-chart="${name}"]`);
    const series = data[name];
    if (!box || !series.names.length) continue;
    const chart = lineChart(box, {
      whole: true,
      xLabel: labels.time,
      format: (v) => formatCount(v),
      series: series.names.map((label, i) => ({
        label: label || labels.other,
        colour: PALETTE[i % PALETTE.length],
        dash: i >= PALETTE.length ? [4, 4] : undefined,
      })),
    });
    chart.update([series.x, ...series.values]);
  }
}

if (window.uPlot) draw();
else window.addEventListener("load", draw);
