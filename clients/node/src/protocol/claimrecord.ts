/**
 * The tagged claim record (protocol level 3): its mark, its fields by name, and the
 * positional fields an older reader takes from them.
 *
 * @module
 */

/** A tagged claim record's first element (no task id starts with byte 1). */
export const CLAIM_MARK = "\x013";
/** The claim record form this worker reads (its worker record's `claim_record`). */
export const CLAIM_RECORD = 3;

/** A tagged record's fields by name and its payload; null for a positional record. */
export function taggedFields(record: string): [Map<string, string>, string] | null {
  if (!record.startsWith(CLAIM_MARK + "\0")) return null;
  const end = record.indexOf("\0\0");
  const head = end < 0 ? record : record.slice(0, end);
  const payload = end < 0 ? "" : record.slice(end + 2);
  const parts = head.split("\0");
  const fields = new Map<string, string>();
  for (let i = 1; i + 1 < parts.length; i += 2)
    fields.set(parts[i] as string, parts[i + 1] as string);
  return [fields, payload];
}

/**
 * A tagged record's fields in the positional form's order (id, token, attempts,
 * max_attempts, timeout, lost, priority, cost) and its waited_ms; null without an id or a
 * token.
 */
export function positionalParts(f: ReadonlyMap<string, string>): [string[], string] | null {
  const id = f.get("id");
  const token = f.get("token");
  if (id === undefined || token === undefined) return null;
  const parts = [
    id,
    token,
    f.get("attempts") ?? "",
    f.get("max_attempts") ?? "",
    f.get("timeout") ?? "",
    f.get("lost") ?? "0",
    f.get("priority") ?? "0",
    f.get("cost") ?? "1",
  ];
  return [parts, f.get("waited_ms") ?? ""];
}
