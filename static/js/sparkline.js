// Tiny line charts on <canvas class="sparkline"> for NPU cards; no library.
//
//   import { sparklineFor } from "/static/js/sparkline.js";
//   sparklineFor(canvas, { min: 0, max: 100, points: 60 }).update(utilisationHistory);
//
// Built to stay cheap with 64 nodes × 8 cards updated every second:
// - update() compares with what was last drawn and does nothing when the data did not change;
// - all pending draws run together in one animation frame (none at all while the tab is hidden);
// - canvases scrolled out of view are not drawn until they come back into view;
// - sizes come from one shared ResizeObserver and colours are read once per theme, so drawing
//   never forces a layout or style recalculation;
// - the backing store follows devicePixelRatio (HiDPI screens, browser zoom) for crisp lines.
// The line colour is the CSS variable --spark on the canvas (set by panel.css for each theme).

const instances = new Set();
const byCanvas = new WeakMap();
const pending = new Set();
let frame = 0;

const resizeObserver = new ResizeObserver((entries) => {
  for (const entry of entries) {
    const sparkline = byCanvas.get(entry.target);
    if (sparkline) sparkline.resize(entry.contentRect.width, entry.contentRect.height);
  }
});

const visibilityObserver = new IntersectionObserver((entries) => {
  for (const entry of entries) {
    const sparkline = byCanvas.get(entry.target);
    if (!sparkline) continue;
    sparkline.visible = entry.isIntersecting;
    if (sparkline.visible && sparkline.dirty) requestDraw(sparkline);
  }
});

function requestDraw(sparkline) {
  pending.add(sparkline);
  if (!frame) frame = requestAnimationFrame(flush);
}

function flush() {
  frame = 0;
  for (const sparkline of pending) {
    if (sparkline.canvas.isConnected) sparkline.draw();
    else sparkline.destroy(); // removed by an htmx swap without being destroyed
  }
  pending.clear();
}

function redrawAll({ restyle = false, resize = false } = {}) {
  for (const sparkline of instances) {
    if (!sparkline.canvas.isConnected) {
      sparkline.destroy();
      continue;
    }
    if (restyle) sparkline.color = null;
    if (resize) sparkline.resize(sparkline.cssWidth, sparkline.cssHeight);
    sparkline.dirty = true;
    requestDraw(sparkline);
  }
}

document.addEventListener("panel:themechange", () => redrawAll({ restyle: true }));

// devicePixelRatio changes with browser zoom or when the window moves to another screen.
function watchPixelRatio() {
  const query = window.matchMedia(`(resolution: ${window.devicePixelRatio}dppx)`);
  query.addEventListener(
    "change",
    () => {
      redrawAll({ resize: true });
      watchPixelRatio();
    },
    { once: true },
  );
}
watchPixelRatio();

function sameValues(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i] && !(Number.isNaN(a[i]) && Number.isNaN(b[i]))) return false;
  }
  return true;
}

function isGap(value) {
  return value === null || value === undefined || !Number.isFinite(value);
}

/**
 * Draw `values` into a context already scaled to CSS pixels. Pure: the caller owns size and colour.
 * min/max fix the vertical scale (0–100 for utilisation, so cards compare at a glance); leave them
 * out to fit the data. `points` is the window length: a half-filled history sits at the right edge,
 * newest point last. null/NaN values leave a gap instead of drawing a false zero.
 */
export function drawSparkline(context, width, height, values, { min, max, points, color = "#0969da" } = {}) {
  context.clearRect(0, 0, width, height);
  const present = values.filter((v) => !isGap(v));
  if (present.length === 0 || width <= 0 || height <= 0) return;

  let low = min ?? Math.min(...present);
  let high = max ?? Math.max(...present);
  if (high === low) {
    high += 1;
    low -= 1;
  }
  const pad = 2; // keeps the line and the end dot inside the canvas
  const slots = Math.max(points ?? values.length, values.length, 2);
  const step = (width - pad * 2) / (slots - 1);
  const firstX = width - pad - (values.length - 1) * step;
  const xAt = (i) => firstX + i * step;
  const yAt = (v) => pad + (1 - (Math.min(Math.max(v, low), high) - low) / (high - low)) * (height - pad * 2);

  context.lineWidth = 1.25;
  context.lineJoin = "round";
  context.strokeStyle = color;
  context.fillStyle = color;

  // Faint area under each unbroken run, then the line on top.
  context.globalAlpha = 0.15;
  context.beginPath();
  let runStart = -1;
  for (let i = 0; i <= values.length; i++) {
    const gap = i === values.length || isGap(values[i]);
    if (!gap && runStart < 0) {
      runStart = i;
      context.moveTo(xAt(i), height);
    }
    if (!gap) context.lineTo(xAt(i), yAt(values[i]));
    if (gap && runStart >= 0) {
      context.lineTo(xAt(i - 1), height);
      context.closePath();
      runStart = -1;
    }
  }
  context.fill();

  context.globalAlpha = 1;
  context.beginPath();
  let drawing = false;
  for (let i = 0; i < values.length; i++) {
    if (isGap(values[i])) {
      drawing = false;
      continue;
    }
    if (drawing) context.lineTo(xAt(i), yAt(values[i]));
    else context.moveTo(xAt(i), yAt(values[i]));
    drawing = true;
  }
  context.stroke();

  const last = values.length - 1;
  if (!isGap(values[last])) {
    context.beginPath();
    context.arc(xAt(last), yAt(values[last]), 1.75, 0, Math.PI * 2);
    context.fill();
  }
}

export class Sparkline {
  constructor(canvas, options = {}) {
    if (!(canvas instanceof HTMLCanvasElement)) {
      throw new TypeError("Sparkline needs a <canvas> element; got " + String(canvas));
    }
    this.canvas = canvas;
    this.context = canvas.getContext("2d");
    this.options = options;
    this.values = [];
    this.color = null;
    this.cssWidth = 0;
    this.cssHeight = 0;
    this.visible = false;
    this.dirty = false;
    instances.add(this);
    byCanvas.set(canvas, this);
    resizeObserver.observe(canvas);
    visibilityObserver.observe(canvas);
  }

  /** Show these values; cheap to call every second: unchanged data costs one comparison. */
  update(values) {
    if (sameValues(values, this.values)) return;
    this.values = Array.from(values);
    this.dirty = true;
    if (this.visible) requestDraw(this);
  }

  resize(cssWidth, cssHeight) {
    this.cssWidth = cssWidth;
    this.cssHeight = cssHeight;
    const ratio = window.devicePixelRatio || 1;
    const width = Math.round(cssWidth * ratio);
    const height = Math.round(cssHeight * ratio);
    // Assigning canvas.width clears and reallocates the canvas, so only do it on a real change.
    if (this.canvas.width !== width || this.canvas.height !== height) {
      this.canvas.width = width;
      this.canvas.height = height;
      this.dirty = true;
    }
    if (this.dirty && this.visible) requestDraw(this);
  }

  draw() {
    if (!this.dirty || !this.visible || this.cssWidth === 0) return;
    if (this.color === null) {
      this.color = getComputedStyle(this.canvas).getPropertyValue("--spark").trim() || "#0969da";
    }
    const ratio = this.canvas.width / this.cssWidth;
    this.context.setTransform(ratio, 0, 0, ratio, 0, 0);
    drawSparkline(this.context, this.cssWidth, this.cssHeight, this.values, { ...this.options, color: this.color });
    this.dirty = false;
  }

  destroy() {
    resizeObserver.unobserve(this.canvas);
    visibilityObserver.unobserve(this.canvas);
    instances.delete(this);
    pending.delete(this);
    byCanvas.delete(this.canvas);
  }
}

/** The canvas's Sparkline, created on first use (options apply only then). */
export function sparklineFor(canvas, options) {
  return byCanvas.get(canvas) || new Sparkline(canvas, options);
}
