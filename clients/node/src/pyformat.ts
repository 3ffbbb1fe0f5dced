/**
 * Numbers and JSON text written the way the Python package writes them, so that a task
 * enqueued from either language is stored as the same bytes (an enqueue of an existing
 * id compares payloads by their text) and messages read alike.
 *
 * @module
 */

/** A number as Python's `'%g' % value` shows it (six significant digits). */
export function formatG(value: number): string {
  if (Number.isNaN(value)) return "nan";
  if (!Number.isFinite(value)) return value > 0 ? "inf" : "-inf";
  if (value === 0) return Object.is(value, -0) ? "-0" : "0";
  const [mantissa = "", expText = "0"] = value.toExponential(5).split("e");
  const exp = Number(expText);
  if (exp < -4 || exp >= 6) {
    const digits = stripZeros(mantissa);
    const sign = exp < 0 ? "-" : "+";
    return `${digits}e${sign}${String(Math.abs(exp)).padStart(2, "0")}`;
  }
  return stripZeros(value.toFixed(Math.max(0, 5 - exp)));
}

function stripZeros(text: string): string {
  return text.includes(".") ? text.replace(/\.?0+$/, "") : text;
}

/** A finite number as Python's `repr(float(value))`: `30.0`, `0.5`, `1e-05`, `1e+16`. */
export function floatRepr(value: number): string {
  if (value === 0) return Object.is(value, -0) ? "-0.0" : "0.0";
  // JS and Python both print the shortest text that reads back as the same double; only
  // where each switches to an exponent, and how it writes one, differ.
  const [mantissa = "", expText = "0"] = value.toExponential().split("e");
  const exp = Number(expText);
  const negative = mantissa.startsWith("-");
  const digits = mantissa.replace("-", "").replace(".", "");
  const sign = negative ? "-" : "";
  if (exp < -4 || exp >= 16) {
    const body = digits.length > 1 ? `${digits[0] ?? ""}.${digits.slice(1)}` : digits;
    return `${sign}${body}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
  }
  if (exp < 0) return `${sign}0.${"0".repeat(-exp - 1)}${digits}`;
  const whole = digits.slice(0, exp + 1).padEnd(exp + 1, "0");
  const fraction = digits.slice(exp + 1);
  return `${sign}${whole}.${fraction === "" ? "0" : fraction}`;
}

/** Compare two strings by Unicode code point, as Python sorts `str` (JS compares UTF-16 units). */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    const xs = x >= 0xd800 && x <= 0xdfff;
    const ys = y >= 0xd800 && y <= 0xdfff;
    if (xs !== ys) return xs ? 1 : -1; // a surrogate starts a code point above every BMP one
    return x - y;
  }
  return a.length - b.length;
}
