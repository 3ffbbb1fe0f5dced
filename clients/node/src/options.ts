/**
 * Options objects checked for keys they do not take: a misspelt option (`{ priorty: 5 }`)
 * or a symbol key is refused with the key's name, never ignored.
 *
 * @module
 */

import { InvalidArgument } from "./errors.js";

/** How many single-character edits turn `a` into `b` (Levenshtein). */
function distance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      next.push(Math.min((row[j] ?? 0) + 1, (next[j - 1] ?? 0) + 1, (row[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1)));
    }
    row = next;
  }
  return row[b.length] ?? 0;
}

/** The known name `key` was likely meant as: same letters in another case, or within two edits. */
export function nearest(key: string, known: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestDistance = 3;
  for (const name of known) {
    const d = name.toLowerCase() === key.toLowerCase() ? 0 : distance(key, name);
    if (d < bestDistance) [best, bestDistance] = [name, d];
  }
  return best;
}

/**
 * Refuse `options` (an object a caller passed; undefined or null: nothing to check) when it
 * has a key not in `known`, or any symbol key: an `InvalidArgument` naming `what`, the key
 * and, for a near miss, the option meant.
 */
export function checkOptionKeys(options: unknown, known: ReadonlySet<string>, what: string): void {
  if (options === undefined || options === null) return;
  if (typeof options !== "object") throw new InvalidArgument(`${what} must be an object, not ${typeof options}`);
  for (const key of Reflect.ownKeys(options)) {
    if (typeof key === "symbol") {
      throw new InvalidArgument(`${what} takes no symbol keys, not ${key.toString()}`);
    }
    if (known.has(key)) continue;
    const meant = nearest(key, known);
    const hint = meant === undefined ? "" : ` (did you mean '${meant}'?)`;
    throw new InvalidArgument(`${what} has no option '${key}'${hint}; known: ${[...known].sort().join(", ")}`);
  }
}
