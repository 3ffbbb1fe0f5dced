/**
 * The worker's log lines on stderr, one per event, as the Python worker writes them
 * (`cli/logs.py`): `key=value` (greppable) or JSON, with the same event names and fields.
 *
 * @module
 */

/** Severity of a log line. */
export type Level = "debug" | "info" | "warning" | "error";

const RANK: Record<Level, number> = { debug: 10, info: 20, warning: 30, error: 40 };

/** Where log lines go and which are kept. */
export interface LogConfig {
  format: "kv" | "json";
  level: Level;
  write: (line: string) => void;
}

const config: LogConfig = {
  format: "kv",
  level: "info",
  write: (line) => process.stderr.write(`${line}\n`),
};

/** Set the format and the least level written (the CLI's `--log-format`, `--log-level`). */
export function configureLogging(
  format: "kv" | "json",
  level: Level,
  write?: (line: string) => void,
): void {
  config.format = format;
  config.level = level;
  if (write !== undefined) config.write = write;
}

/** Whether lines of `level` are written. */
export function enabled(level: Level): boolean {
  return RANK[level] >= RANK[config.level];
}

function kv(value: unknown): string {
  if (typeof value === "boolean") return value ? "true" : "false";
  let text: string;
  if (value === null || value === undefined) text = "None";
  else if (typeof value === "string") text = value;
  else if (typeof value === "number" || typeof value === "bigint") text = value.toString();
  else text = JSON.stringify(value);
  if (text === "" || /[ "=\n\t]/.test(text)) return JSON.stringify(text);
  return text;
}

/** One line: `ts=... level=... event=...` and the fields, in the configured format. */
export function logEvent(
  level: Level,
  event: string,
  fields: Readonly<Record<string, unknown>> = {},
): void {
  if (!enabled(level)) return;
  const record: Record<string, unknown> = {
    ts: new Date().toISOString().replace("Z", "+00:00"),
    level,
    event,
    ...fields,
  };
  const line =
    config.format === "json"
      ? JSON.stringify(record)
      : Object.entries(record)
          .map(([key, value]) => `${key}=${kv(value)}`)
          .join(" ");
  config.write(line);
}
