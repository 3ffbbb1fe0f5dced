/**
 * `Quota`: a provider quota shared by every queue, group and language that names it
 * (docs/quotas.md). The Python client's `producer/providerquota.py` and
 * `protocol/provider_quota.py`, on the same `provider_quota` and `settle` scripts.
 *
 * ```ts
 * const openai = new Quota("openai", { redisUrl });
 * await openai.configure({ limits: { requests: 500, input_tokens: 200_000 }, periodMs: 60_000 });
 * await queue.enqueue({ text }, { quotas: { openai: { requests: 1, input_tokens: 3000 } } });
 * ```
 *
 * @module
 */

import { type Bundle, packagedBundle } from "./bundle.js";
import { type Client, type KeyRoute, Scripts, connect } from "./connection.js";
import { InvalidArgument, ProtocolError, describe } from "./errors.js";
import { providerQuotaKey } from "./protocol/index.js";
import { parseRedisURL } from "./redisurl.js";

/** The largest amount of a unit a limit, an estimate or a settlement may name. */
export const MAX_QUOTA_AMOUNT = 2 ** 50;
const MAX_MS = 3_153_600_000_000;
/** Most quotas a task names, and most units a quota or an estimate names. */
export const MAX_QUOTAS = 8;
export const MAX_UNITS = 16;
const QUOTA_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;
/** A unit of a provider quota: lower-case letters, digits and `_`, starting with a letter. */
export const UNIT_NAME = /^[a-z][a-z0-9_]{0,63}$/;

/** One unit of a quota: its limit per period (0: none set) and this window's use. */
export interface QuotaUnit {
  readonly limit: number;
  readonly used: number;
}

/** A provider quota as the scripts see it now (Python's `QuotaUse.as_dict`, in camelCase). */
export interface QuotaUse {
  readonly name: string;
  readonly periodMs: number;
  /** 0: no cap. */
  readonly maxConcurrency: number;
  /** Runs holding a concurrency reservation now. */
  readonly reserved: number;
  /** 0: no pause. */
  readonly pausedUntilMs: number;
  /** When the current window began (epoch ms). */
  readonly windowMs: number;
  readonly reason: string;
  readonly units: Readonly<Record<string, QuotaUnit>>;
}

/** `configure`'s options. */
export interface QuotaLimits {
  /** unit -> units per period, e.g. `{ requests: 500, input_tokens: 200_000 }`. */
  readonly limits: Readonly<Record<string, number>>;
  /** The window's length in ms (default 60 000). */
  readonly periodMs?: number;
  /** Most runs at once (default: no cap). */
  readonly maxConcurrency?: number;
}

/** `name` checked as a quota name. */
export function checkQuotaName(name: unknown): string {
  if (typeof name === "string" && QUOTA_NAME.test(name)) return name;
  throw new InvalidArgument(
    `invalid quota name ${describe(name)}: use 1-200 characters of letters, digits, '.', '_' ` +
      "or '-', starting with a letter or digit",
  );
}

function amount(value: unknown, what: string, positive: boolean): number {
  if (typeof value !== "number" || !Number.isInteger(value))
    throw new InvalidArgument(`${what} must be an int, not ${describe(value)}`);
  const low = positive ? 1 : 0;
  if (value < low || value > MAX_QUOTA_AMOUNT)
    throw new InvalidArgument(`${what} must be ${low}..${MAX_QUOTA_AMOUNT}, not ${value}`);
  return value;
}

/** `{unit: int}` checked, as the compact JSON the scripts take (keys sorted, as Python's). */
export function amountsJson(units: unknown, what: string, positive: boolean): string {
  return JSON.stringify(checkAmounts(units, what, positive));
}

function checkAmounts(units: unknown, what: string, positive: boolean): Record<string, number> {
  if (typeof units !== "object" || units === null || Array.isArray(units))
    throw new InvalidArgument(`${what} must be a non-empty mapping of unit -> int`);
  const names = Object.keys(units).sort();
  if (names.length === 0)
    throw new InvalidArgument(`${what} must be a non-empty mapping of unit -> int`);
  if (names.length > MAX_UNITS)
    throw new InvalidArgument(`${what} names ${names.length} units, at most ${MAX_UNITS}`);
  const out: Record<string, number> = {};
  for (const unit of names) {
    if (!UNIT_NAME.test(unit))
      throw new InvalidArgument(
        `invalid quota unit ${describe(unit)}: use 1-64 lower-case letters, digits or '_', ` +
          "starting with a letter (requests, input_tokens, output_tokens, ...)",
      );
    out[unit] = amount((units as Record<string, unknown>)[unit], `${what}[${unit}]`, positive);
  }
  return out;
}

/** An enqueue's `quotas` checked, as the task stores it ("" for none). */
export function quotasJson(quotas: unknown): string {
  if (typeof quotas !== "object" || quotas === null || Array.isArray(quotas))
    throw new InvalidArgument("quotas must be a mapping of quota name -> units");
  const out: Record<string, Record<string, number>> = {};
  const names = Object.keys(quotas).sort();
  if (names.length > MAX_QUOTAS)
    throw new InvalidArgument(`a task names ${names.length} quotas, at most ${MAX_QUOTAS}`);
  for (const name of names) {
    checkQuotaName(name);
    out[name] = checkAmounts((quotas as Record<string, unknown>)[name], `quotas[${name}]`, false);
  }
  return Object.keys(out).length === 0 ? "" : JSON.stringify(out);
}

/** The `provider_quota` script's reply read; null when the quota does not exist. */
export function quotaUse(name: string, raw: unknown): QuotaUse | null {
  if (Array.isArray(raw) && raw.length === 0) return null;
  if (!Array.isArray(raw) || raw.length < 6 || (raw.length - 6) % 3 !== 0)
    throw new ProtocolError(`provider_quota: unexpected reply ${JSON.stringify(raw)}`);
  const units: Record<string, QuotaUnit> = {};
  for (let i = 6; i < raw.length; i += 3)
    units[String(raw[i])] = { limit: Number(raw[i + 1]), used: Number(raw[i + 2]) };
  return {
    name,
    periodMs: Number(raw[0]),
    maxConcurrency: Number(raw[1]),
    reserved: Number(raw[2]),
    pausedUntilMs: Number(raw[3]),
    windowMs: Number(raw[4]),
    reason: String(raw[5]),
    units,
  };
}

/** The KEYS of a provider quota's own scripts (`name` checked): its hash, so a cluster
 * routes the call to the quota's slot. */
export function quotaRoute(name: string): KeyRoute {
  const keys = [providerQuotaKey(name)];
  return { forScript: () => keys };
}

/** A pause's length checked (whole ms, 0..100 years). */
export function quotaPauseMs(forMs: unknown): number {
  if (typeof forMs !== "number" || !Number.isFinite(forMs) || forMs < 0 || forMs > MAX_MS)
    throw new InvalidArgument(`a pause must be 0..100 years in ms, not ${describe(forMs)}`);
  return Math.ceil(forMs);
}

/**
 * A named provider quota on the queues' Redis: limits per unit per period and an optional
 * concurrency cap, paused and resumed for every queue (and language) that names it.
 */
export class Quota {
  readonly name: string;
  private readonly client: Client;
  private readonly scripts: Scripts;
  private readonly bundle: Bundle;
  // the quota's hash: the call's one key, which routes it to the quota's slot on a cluster
  private readonly route: KeyRoute;

  constructor(name: string, options: { readonly redisUrl?: string } = {}) {
    this.name = checkQuotaName(name);
    this.bundle = packagedBundle();
    this.route = quotaRoute(this.name);
    this.client = connect(parseRedisURL(options.redisUrl ?? "redis://localhost:6379/0"));
    this.scripts = new Scripts(this.client, this.bundle);
  }

  private async run(args: Record<string, string | number>): Promise<QuotaUse | null> {
    const argv = this.bundle.pack("provider_quota", { name: this.name, op: "", ...args });
    return quotaUse(this.name, await this.scripts.run("provider_quota", this.route, argv));
  }

  /**
   * Set the limits, the window (`periodMs`, default a minute) and the concurrency cap. The
   * units named replace those set before; use in the current window is kept.
   */
  async configure(options: QuotaLimits): Promise<QuotaUse> {
    const limits = amountsJson(options.limits, "limits", true);
    const periodMs = options.periodMs ?? 60_000;
    if (
      typeof periodMs !== "number" ||
      !Number.isInteger(periodMs) ||
      periodMs < 1 ||
      periodMs > MAX_MS
    )
      throw new InvalidArgument(`periodMs must be 1 ms..100 years, not ${describe(periodMs)}`);
    const cap =
      options.maxConcurrency === undefined
        ? 0
        : amount(options.maxConcurrency, "maxConcurrency", true);
    const use = await this.run({
      op: "configure",
      limits,
      period_ms: periodMs,
      max_concurrency: cap,
    });
    if (use === null) throw new ProtocolError("provider_quota: configure read nothing back");
    return use;
  }

  /** Limits, this window's use, live reservations and the pause; null when never configured. */
  async get(): Promise<QuotaUse | null> {
    return this.run({ op: "get" });
  }

  /** No claim starts a task naming this quota for `forMs` (a longer pause is kept). */
  async pause(forMs: number, reason = ""): Promise<QuotaUse> {
    const use = await this.run({
      op: "pause",
      pause_ms: quotaPauseMs(forMs),
      reason: reason.slice(0, 200),
    });
    if (use === null)
      throw new InvalidArgument(`no provider quota "${this.name}": configure it first`);
    return use;
  }

  /** End the pause now. */
  async resume(): Promise<QuotaUse> {
    const use = await this.run({ op: "resume" });
    if (use === null)
      throw new InvalidArgument(`no provider quota "${this.name}": configure it first`);
    return use;
  }

  /** Close the connection; always resolves. */
  async close(): Promise<void> {
    await this.client.quit().catch(() => undefined);
    this.client.disconnect();
  }
}
