/**
 * `taskfleet-node provider-quota configure|show|pause|resume NAME`: a provider quota shared
 * by every queue that names it (docs/quotas.md), with the Python `taskfleet
 * provider-quota` command's names, options, output and exit codes. Bad input: one line,
 * exit 2, nothing stored.
 *
 * @module
 */

import { BadInput, type Opt, type Values, help } from "../cli.js";
import { InvalidArgument, InvalidRedisURL } from "../errors.js";
import { Quota, type QuotaUse } from "../providerquota.js";
import {
  DEFAULT_REDIS_URL,
  HELP_OPTION,
  JSON_OPTION,
  PROG,
  REDIS_OPTION,
  out,
  parseCommand,
  pyJson,
  redisFailure,
  terminalSafe,
} from "./output.js";

/** The longest --period and --for the Python command takes, in seconds (100 years). */
const MAX_SECONDS = 3_153_600_000;

const USAGE = `Usage: ${PROG} provider-quota COMMAND NAME ...

Provider quotas shared by every queue that names them (requests, tokens per period).

Commands:
  configure  NAME --limit UNIT=N... [--period S] [--max-concurrency N]
                                Set NAME's limits (--limit requests=500 --limit input_tokens=200000).
  show       NAME [--json]      Show NAME's limits, this window's use, reservations and pause.
  pause      NAME --for S [--reason R]
                                Stop every claim of a task naming NAME, in every queue, for a while.
  resume     NAME               End NAME's pause now.`;

const OPTIONS: Readonly<Record<string, readonly Opt[]>> = {
  configure: [
    { name: "limit", kind: "multi", help: "Units per period, UNIT=N (repeatable)." },
    { name: "period", kind: "float", help: "The window, in seconds [default: 60]." },
    { name: "max-concurrency", kind: "int", help: "Most runs at once." },
  ],
  show: [JSON_OPTION],
  pause: [
    { name: "for", kind: "float", help: "Seconds, above 0 (required)." },
    { name: "reason", kind: "string", help: "Why, shown with the pause." },
  ],
  resume: [],
};

function when(ms: number): string {
  return `${new Date(ms).toISOString().slice(0, 19)}Z`;
}

/** Seconds above 0 and at most 100 years, as the Python command's FiniteFloat checks them. */
function seconds(value: unknown, option: string): number {
  const n = value as number;
  if (n <= 0 || n > MAX_SECONDS)
    throw new BadInput(
      `invalid value for '--${option}': ${String(n)} is not in the range 0<x<=${MAX_SECONDS}`,
    );
  return n;
}

function limitsOf(pairs: readonly string[]): Record<string, number> {
  const limits: Record<string, number> = {};
  for (const pair of pairs) {
    const at = pair.indexOf("=");
    const value = at < 0 ? "" : pair.slice(at + 1);
    if (at < 0 || !/^[0-9]+$/.test(value))
      throw new BadInput(`--limit must be UNIT=N (e.g. input_tokens=200000), not '${pair}'`);
    limits[pair.slice(0, at)] = Number(value);
  }
  if (Object.keys(limits).length === 0) throw new BadInput("give at least one --limit UNIT=N");
  return limits;
}

/** The state as Python's `QuotaUse.as_dict` (its JSON, and the order its text follows). */
function asDict(use: QuotaUse): Record<string, unknown> {
  return {
    name: use.name,
    period_ms: use.periodMs,
    max_concurrency: use.maxConcurrency,
    reserved: use.reserved,
    paused_until_ms: use.pausedUntilMs,
    window_ms: use.windowMs,
    reason: use.reason,
    units: use.units,
  };
}

function show(use: QuotaUse, json: boolean): void {
  if (json) {
    out(pyJson(asDict(use)));
    return;
  }
  const cap = use.maxConcurrency === 0 ? "none" : String(use.maxConcurrency);
  out(
    `quota ${use.name}: window ${use.periodMs} ms from ${when(use.windowMs)}; ` +
      `concurrency ${use.reserved} of ${cap}`,
  );
  if (use.pausedUntilMs > 0) {
    const line = `claims paused until ${when(use.pausedUntilMs)}`;
    out(terminalSafe(line + (use.reason !== "" ? `: ${use.reason}` : "")));
  } else out("claims not paused");
  for (const [unit, value] of Object.entries(use.units))
    out(`${unit}: ${value.used} ${value.limit === 0 ? "no limit" : `of ${value.limit}`}`);
}

async function withQuota<T>(
  name: string,
  values: Values,
  body: (quota: Quota) => Promise<T>,
): Promise<T> {
  const url = (values["redis-url"] as string | undefined) ?? DEFAULT_REDIS_URL;
  let quota: Quota;
  try {
    quota = new Quota(name, { redisUrl: url });
  } catch (error) {
    if (error instanceof InvalidRedisURL)
      throw new BadInput(
        `invalid value for --redis-url: not a Redis URL taskfleet can use: ${error.message}`,
      );
    if (error instanceof InvalidArgument) throw new BadInput(error.message);
    throw error;
  }
  try {
    return await body(quota);
  } catch (error) {
    if (error instanceof InvalidArgument) throw new BadInput(error.message);
    throw redisFailure(error, url);
  } finally {
    await quota.close();
  }
}

/** `provider-quota SUBCOMMAND NAME ...`. */
export async function providerQuotaCommand(args: readonly string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === undefined || sub === "--help") {
    out(USAGE);
    return sub === undefined ? 2 : 0;
  }
  const own = OPTIONS[sub];
  if (own === undefined)
    throw new BadInput(
      `no such command 'provider-quota ${sub}'; use configure, show, pause or resume`,
    );
  const opts = [...own, REDIS_OPTION, HELP_OPTION];
  const [v, given] = parseCommand(rest, opts);
  if (v.help === true) {
    out(help(USAGE, opts));
    return 0;
  }
  const [name, extra] = given;
  if (name === undefined) throw new BadInput("missing argument 'NAME'");
  if (extra !== undefined) throw new BadInput(`got unexpected extra argument (${extra})`);
  if (sub === "configure") {
    const limits = limitsOf((v.limit as string[] | undefined) ?? []);
    const period = seconds(v.period ?? 60, "period");
    const cap = v["max-concurrency"] as number | undefined;
    return withQuota(name, v, async (quota) => {
      const use = await quota.configure({
        limits,
        periodMs: Math.ceil(period * 1000),
        ...(cap === undefined ? {} : { maxConcurrency: cap }),
      });
      show(use, false);
      return 0;
    });
  }
  if (sub === "show") {
    return withQuota(name, v, async (quota) => {
      const use = await quota.get();
      if (use === null) throw new BadInput(`no provider quota '${name}': configure it first`);
      show(use, v.json === true);
      return 0;
    });
  }
  if (sub === "pause") {
    if (v.for === undefined) throw new BadInput("missing option '--for'");
    const forS = seconds(v.for, "for");
    return withQuota(name, v, async (quota) => {
      const use = await quota.pause(Math.ceil(forS * 1000), (v.reason as string | undefined) ?? "");
      out(`quota ${use.name}: claims paused until ${when(use.pausedUntilMs)}`);
      return 0;
    });
  }
  return withQuota(name, v, async (quota) => {
    await quota.resume();
    out(`quota ${name}: claims resumed`);
    return 0;
  });
}
