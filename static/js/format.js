// Locale-aware formatting for figures the panel shows: sizes, percentages, power, temperature,
// dates (in the viewer's time zone) and durations. The locale is the page's <html lang>, which
// Django sets from the active language (e.g. "zh-hans", "en"), so a page reads the same in both
// languages whether the server or the browser rendered the number.
//
// Missing values (null, undefined, NaN — e.g. power reported as "N/A") format as MISSING, never as 0.
// Formatters are cached per locale and options: a dashboard of 512 NPU cards formats thousands of
// figures a second, and building an Intl formatter is far slower than using one.

export const MISSING = "—";

// Memory and sizes are counted in steps of 1024 everywhere in the panel (npu-smi's "MB" are MiB: a 64 GiB
// card reports 65536), so they are labelled as binary units, as the server's templates label them.
const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
const formatters = new Map();

/** The page's locale, canonicalised ("zh-hans" → "zh-Hans"); "en" when it is missing or invalid. */
export function pageLocale() {
  const lang = document.documentElement.lang || navigator.language || "en";
  try {
    return Intl.getCanonicalLocales(lang)[0] || "en";
  } catch {
    return "en";
  }
}

function cached(kind, locale, options, make) {
  const key = `${kind}|${locale}|${JSON.stringify(options)}`;
  let formatter = formatters.get(key);
  if (!formatter) {
    formatter = make();
    formatters.set(key, formatter);
  }
  return formatter;
}

function numberFormat(options, locale = pageLocale()) {
  return cached("n", locale, options, () => new Intl.NumberFormat(locale, options));
}

function isMissing(value) {
  return value === null || value === undefined || value === "" || Number.isNaN(Number(value));
}

/** A plain number with locale grouping: formatNumber(12345.6) → "12,345.6". */
export function formatNumber(value, options = { maximumFractionDigits: 1 }) {
  if (isMissing(value)) return MISSING;
  return numberFormat(options).format(Number(value));
}

// Big counts in the units a reader of the page's language thinks in: thousands in English, 万 (10⁴) and
// 亿 (10⁸) in Chinese. panel/core/domain/numbers.py writes them the same way on the server.
const COMPACT_FROM = 100000;
const WESTERN_UNITS = [
  [1e12, "T"],
  [1e9, "B"],
  [1e6, "M"],
  [1e3, "K"],
];
const MYRIAD_UNITS = [
  [1e12, "万亿"],
  [1e8, "亿"],
  [1e4, "万"],
];

/**
 * A count, shortened once it is big: formatCount(4096) → "4,096", formatCount(113034752) → "113.0 M"
 * (English) or "1.13 亿" (简体中文). Two decimals below 10 of a unit, one above.
 */
export function formatCount(value) {
  if (isMissing(value)) return MISSING;
  const count = Number(value);
  if (Math.abs(count) >= COMPACT_FROM) {
    const units = pageLocale().toLowerCase().startsWith("zh") ? MYRIAD_UNITS : WESTERN_UNITS;
    for (const [size, unit] of units) {
      if (Math.abs(count) < size) continue;
      const amount = count / size;
      const digits = Math.abs(amount) < 10 ? 2 : 1;
      return `${numberFormat({ minimumFractionDigits: digits, maximumFractionDigits: digits }).format(amount)} ${unit}`;
    }
  }
  return numberFormat({ maximumFractionDigits: 0 }).format(Math.round(count));
}

/**
 * A size with a unit that fits: formatBytes(65536, "MB") → "64 GiB", formatBytes(1536) → "1.5 KiB".
 * `from` names the unit of `value`: "B" (default), "KB", "MB", "GB", "TB" or "PB" (or their binary
 * spellings "MiB" …), any case; all of them count in steps of 1024, as npu-smi does.
 */
export function formatBytes(value, from = "B", { maximumFractionDigits } = {}) {
  if (isMissing(value)) return MISSING;
  const start = BYTE_UNITS.findIndex((unit) => unit.replace("i", "").toUpperCase() === String(from).replace(/i/i, "").toUpperCase());
  if (start < 0) throw new Error(`formatBytes: unknown unit "${from}"; use B, KB, MB, GB, TB or PB`);
  let amount = Number(value);
  let unit = start;
  while (Math.abs(amount) >= 1024 && unit < BYTE_UNITS.length - 1) {
    amount /= 1024;
    unit += 1;
  }
  const digits = maximumFractionDigits ?? (unit === 0 || Math.abs(amount) >= 100 ? 0 : 1);
  // Intl's own byte units would say "kB" and count in 1000s; these labels are what admins read in
  // npu-smi, and are the same in Chinese.
  return `${numberFormat({ maximumFractionDigits: digits }).format(amount)} ${BYTE_UNITS[unit]}`;
}

/** `percent` is 0–100 (as telemetry reports it): formatPercent(87.25) → "87%". */
export function formatPercent(percent, fractionDigits = 0) {
  if (isMissing(percent)) return MISSING;
  return numberFormat({
    style: "percent",
    minimumFractionDigits: fractionDigits,
    maximumFractionDigits: fractionDigits,
  }).format(Number(percent) / 100);
}

/** Power in watts: formatPower(245.3) → "245 W". Intl has no watt unit, and "W" is universal. */
export function formatPower(watts) {
  if (isMissing(watts)) return MISSING;
  return `${numberFormat({ maximumFractionDigits: 0 }).format(Number(watts))} W`;
}

/** Temperature: formatTemperature(56) → "56°C". */
export function formatTemperature(celsius) {
  if (isMissing(celsius)) return MISSING;
  const options = { style: "unit", unit: "celsius", maximumFractionDigits: 0 };
  return numberFormat(options).format(Number(celsius));
}

function toDate(value) {
  if (value instanceof Date) return value;
  if (typeof value === "number") return new Date(value); // epoch milliseconds
  return new Date(String(value)); // ISO 8601 as the API sends it, with its offset
}

/**
 * A moment in the viewer's own time zone (Intl's default), e.g. "Mar 5, 2025, 03:04:05" / "2025年3月5日 03:04:05".
 * Pass Intl.DateTimeFormat options to change the shape, e.g. { timeStyle: "medium" } for a time only.
 */
export function formatDateTime(value, options = { dateStyle: "medium", timeStyle: "medium" }) {
  if (value === null || value === undefined || value === "") return MISSING;
  const date = toDate(value);
  if (Number.isNaN(date.getTime())) return MISSING;
  const locale = pageLocale();
  const withClock = { hourCycle: "h23", ...options };
  return cached("d", locale, withClock, () => new Intl.DateTimeFormat(locale, withClock)).format(date);
}

const DURATION_PARTS = [
  ["day", 86400],
  ["hour", 3600],
  ["minute", 60],
  ["second", 1],
];

/**
 * A span of time from seconds, to the two largest units: 3725 → "1h 2m" / "1小时2分钟",
 * 45 → "45s", 0.25 → "250ms". Negative spans are formatted by their size.
 */
export function formatDuration(seconds) {
  if (isMissing(seconds)) return MISSING;
  const total = Math.abs(Number(seconds));
  const locale = pageLocale();
  const unitFormat = (unit, amount) =>
    numberFormat({ style: "unit", unit, unitDisplay: "narrow", maximumFractionDigits: 0 }, locale).format(amount);
  if (total === 0) return unitFormat("second", 0);
  if (total < 1) return unitFormat("millisecond", Math.round(total * 1000));
  let rest = Math.round(total);
  const parts = [];
  for (const [unit, size] of DURATION_PARTS) {
    const amount = Math.floor(rest / size);
    rest -= amount * size;
    if (amount > 0 || parts.length > 0) parts.push([unit, amount]);
    if (parts.length === 2) break;
  }
  // "2h" reads better than "2h 0m".
  if (parts.length === 2 && parts[1][1] === 0) parts.pop();
  const list = cached("l", locale, {}, () => new Intl.ListFormat(locale, { type: "unit", style: "narrow" }));
  return list.format(parts.map(([unit, amount]) => unitFormat(unit, amount)));
}

/** "3 minutes ago" / "3分钟前", for heartbeats and last-seen times. */
export function formatRelativeTime(value, now = Date.now()) {
  if (value === null || value === undefined || value === "") return MISSING;
  const date = toDate(value);
  if (Number.isNaN(date.getTime())) return MISSING;
  const deltaSeconds = (date.getTime() - now) / 1000;
  const locale = pageLocale();
  const relative = cached("r", locale, {}, () => new Intl.RelativeTimeFormat(locale, { numeric: "auto" }));
  for (const [unit, size] of DURATION_PARTS) {
    if (Math.abs(deltaSeconds) >= size || unit === "second") {
      return relative.format(Math.round(deltaSeconds / size), unit);
    }
  }
  return MISSING;
}

/**
 * Fill <time datetime="…ISO…"> elements with the viewer's local rendering. data-format picks the
 * shape: "datetime" (default), "date", "time", "relative", or "none" to leave one alone. The server's
 * text stays when the value does not parse; the full moment goes in the tooltip.
 * Call once on load and again on htmx:afterSwap with the swapped element.
 */
export function localizeTimes(root = document) {
  const shapes = {
    datetime: undefined,
    date: { dateStyle: "medium" },
    time: { timeStyle: "medium" },
  };
  for (const element of root.querySelectorAll("time[datetime]")) {
    const value = element.getAttribute("datetime");
    const shape = element.dataset.format || "datetime";
    if (shape === "none") continue;
    const text = shape === "relative" ? formatRelativeTime(value) : formatDateTime(value, shapes[shape]);
    if (text === MISSING) continue; // unparseable: the server's own text is better than a dash
    element.textContent = text;
    element.title = formatDateTime(value, { dateStyle: "full", timeStyle: "long" });
  }
}
