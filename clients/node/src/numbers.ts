/**
 * The protocol's number rule (docs/protocol.md, section 1): every JSON text a client
 * stores (payloads, results, progress) holds only finite numbers, and its integers lie
 * within ±(2^53-1), the integers every reader holds exactly. The Python package's
 * `protocol/numbers.py`, with the same messages.
 *
 * @module
 */

/** A JSON text without a run of 16 digits holds no integer out of range. */
const LONG_DIGITS = /[0-9]{16}/;
const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
// A JSON string, or a number (sign, digits, fraction, exponent) outside strings
const TOKEN = /"(?:[^"\\]|\\.)*"|(-?[0-9]+)(\.[0-9]+)?([eE][+-]?[0-9]+)?/g;
const SAFE_MAX = BigInt(Number.MAX_SAFE_INTEGER);

/** `path` and one step into an object or array, as the error lines show it. */
export function pathStep(path: string, key: string | number): string {
  if (typeof key === "number") return `${path}[${key}]`;
  return IDENTIFIER.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

/**
 * Why `value` (a number at `path`) breaks the rule, or undefined. A whole number JSON
 * writes as digits (below 1e21) must be a safe integer: past 2^53 it is already rounded.
 */
export function numberProblem(value: number, path: string): string | undefined {
  if (Number.isSafeInteger(value)) return undefined;
  if (!Number.isFinite(value))
    return `${path}: ${String(value)} is not a finite number; JSON cannot carry it`;
  if (Number.isInteger(value) && Math.abs(value) < 1e21) {
    return `${path}: integer ${BigInt(value).toString()} is outside ±(2^53-1); send it as a string`;
  }
  return undefined;
}

/**
 * The first number of `value` (arrays and plain objects walked in order, as JSON would
 * write them) that breaks the rule, as one line naming its path; undefined when none does.
 * Called once a writer has met a problem, to say where it is.
 */
export function valueProblem(
  value: unknown,
  path: string,
  seen = new Set<object>(),
): string | undefined {
  if (typeof value === "number") return numberProblem(value, path);
  if (typeof value !== "object" || value === null || seen.has(value)) return undefined;
  seen.add(value);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const problem = valueProblem(value[i], pathStep(path, i), seen);
      if (problem !== undefined) return problem;
    }
    return undefined;
  }
  for (const [key, item] of Object.entries(value)) {
    const problem = valueProblem(item, pathStep(path, key), seen);
    if (problem !== undefined) return problem;
  }
  return undefined;
}

/**
 * What breaks the rule in stored JSON `text` (written by an older writer or by hand), read
 * as text: an integer literal outside ±(2^53-1), which `JSON.parse` would round.
 */
export function storedNumberProblem(text: string, path: string): string | undefined {
  if (!LONG_DIGITS.test(text)) return undefined;
  for (const match of text.matchAll(TOKEN)) {
    const digits = match[1];
    if (digits === undefined || match[2] !== undefined || match[3] !== undefined) continue;
    if (digits.replace("-", "").length < 16) continue;
    const value = BigInt(digits);
    if (value > SAFE_MAX || -value > SAFE_MAX) {
      return `${path}: integer ${digits} is outside ±(2^53-1); send it as a string`;
    }
  }
  return undefined;
}
