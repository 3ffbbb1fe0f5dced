// A runner of the protocol's conformance vectors (conformance/README.md, format 1): each
// case's script calls packed by this package's Bundle.pack from the manifest, sent as
// EVALSHA, and every reply and stored record matched as the format says.
import { readFileSync, readdirSync } from "node:fs";

import type { Redis } from "ioredis";

import type { ArgValue, Bundle } from "../src/bundle.js";

type Reply = number | Buffer | null | Reply[] | Map<string, Buffer> | { error: string };
type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Captured = Reply | Json;

export interface Case {
  readonly name: string;
  readonly queue: string;
  readonly steps: readonly Record<string, unknown>[];
}

const READS = new Set([
  "HGETALL",
  "HGET",
  "HEXISTS",
  "EXISTS",
  "GET",
  "TYPE",
  "ZRANGE",
  "ZSCORE",
  "ZCARD",
  "LRANGE",
  "LLEN",
  "SMEMBERS",
  "SCARD",
  "PTTL",
  "XRANGE",
]);
const WRITES = new Set([
  "HSET",
  "HDEL",
  "DEL",
  "ZADD",
  "ZREM",
  "SADD",
  "SREM",
  "SET",
  "RPUSH",
  "LPUSH",
  "XADD",
]);

/** Every case of the files in `dir`, checked against the manifest's protocol. */
export function loadCases(dir: string, protocol: number): Case[] {
  const out: Case[] = [];
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith(".json"))
    .sort()) {
    const data = JSON.parse(readFileSync(`${dir}/${file}`, "utf8")) as {
      format: number;
      protocol: number;
      cases: { id: string; queue: string; steps: Record<string, unknown>[] }[];
    };
    if (data.format !== 1)
      throw new Error(`${file}: format ${data.format}; this runner reads format 1`);
    if (data.protocol !== protocol)
      throw new Error(
        `${file}: written for protocol ${data.protocol}, the manifest's is ${protocol}`,
      );
    for (const c of data.cases)
      out.push({ name: `${file.replace(/\.json$/, "")}/${c.id}`, queue: c.queue, steps: c.steps });
  }
  return out;
}

class Failure extends Error {}

function text(value: Captured): string {
  if (Buffer.isBuffer(value)) return value.toString("utf8");
  if (typeof value === "number") return String(value);
  if (typeof value === "string") return value;
  throw new Failure(`cannot use ${JSON.stringify(value)} as text`);
}

function numberOf(value: Captured): number | null {
  if (typeof value === "number") return value;
  if (Buffer.isBuffer(value) || typeof value === "string") {
    const t = text(value).trim();
    return /^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(t) ? Number(t) : null;
  }
  return null;
}

/**
 * An encode step's value in JavaScript: `{"$int": digits}` the number of those digits (past
 * 2^53 rounded, as a caller holds it), `{"$float": text}` the number of that text.
 */
function payloadValue(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(payloadValue);
  if (typeof v !== "object" || v === null) return v;
  const o = v as Record<string, unknown>;
  if (typeof o.$int === "string") return Number(o.$int);
  if (typeof o.$float === "string") return Number(o.$float);
  return Object.fromEntries(Object.entries(o).map(([k, item]) => [k, payloadValue(item)]));
}

/** The client's payload writer, which `encode` steps check: the stored text, or it throws. */
export type Encoder = (payload: unknown) => string;

/** One case run on `client` (a connection of its own; the database is flushed first). */
export async function runCase(
  client: Redis,
  bundle: Bundle,
  c: Case,
  encode?: Encoder,
): Promise<void> {
  const prefix = bundle.manifest.key_prefix.replace("%QUEUE%", c.queue);
  const byName = new Map(bundle.manifest.keys.map((k) => [k.name, prefix + k.suffix]));
  // a call's KEYS: the keys its script uses, in its uses_keys order
  const keysOf = (script: string): string[] =>
    bundle.script(script).decl.uses_keys.map((k) => byName.get(k) ?? "");
  const captured = new Map<string, Captured>();
  await client.flushdb();

  const keyOf = (ref: unknown): string => {
    const { key, id } = ref as { key: string; id?: unknown };
    const decl = bundle.manifest.keys.find((k) => k.name === key);
    if (decl === undefined) throw new Failure(`no key ${key}`);
    if (decl.is_prefix !== (id !== undefined))
      throw new Failure(`key ${key}: an id ${decl.is_prefix ? "is needed" : "is refused"}`);
    return prefix + decl.suffix + (id === undefined ? "" : text(value(id)));
  };

  const value = (v: unknown): Buffer | string => {
    if (typeof v === "string") return v;
    if (typeof v === "number") {
      if (!Number.isInteger(v)) throw new Failure(`a VALUE with a fraction: ${v}`);
      return String(v);
    }
    const o = v as Record<string, unknown>;
    if ("$hex" in o) return Buffer.from(o.$hex as string, "hex");
    if ("$ref" in o) {
      const found = captured.get(o.$ref as string);
      if (found === undefined) throw new Failure(`$ref ${String(o.$ref)} not captured`);
      return Buffer.isBuffer(found) ? found : text(found);
    }
    if ("$add" in o)
      return String(
        (o.$add as unknown[]).reduce<bigint>((sum, t) => sum + BigInt(text(value(t))), 0n),
      );
    if ("$sub" in o) {
      const [a, b] = o.$sub as unknown[];
      return String(BigInt(text(value(a))) - BigInt(text(value(b))));
    }
    throw new Failure(`not a VALUE: ${JSON.stringify(v)}`);
  };

  const send = async (command: string, args: (string | Buffer)[]): Promise<Reply> => {
    try {
      return (await client.callBuffer(command, args)) as Reply;
    } catch (error) {
      return { error: (error as Error).message };
    }
  };

  const match = (expect: unknown, actual: Captured, path: string, inJson: boolean): void => {
    const fail = (why: string): never => {
      throw new Failure(
        `${path}: ${why}; expected ${JSON.stringify(expect)}, found ${show(actual)}`,
      );
    };
    const check = (ok: boolean, why: string): void => {
      if (!ok) fail(why);
    };
    if (expect === null) {
      check(actual === null, "not nil");
      return;
    }
    if (typeof expect === "boolean") {
      check(actual === expect, "not that boolean");
      return;
    }
    if (typeof expect === "string") {
      if (Buffer.isBuffer(actual)) {
        check(actual.equals(Buffer.from(expect, "utf8")), "other bytes");
        return;
      }
      check(inJson && actual === expect, "not that string");
      return;
    }
    if (typeof expect === "number") {
      if (typeof actual === "number" && (inJson || Number.isInteger(actual))) {
        check(actual === expect, "other number");
        return;
      }
      return fail("not an integer");
    }
    if (Array.isArray(expect)) {
      if (!Array.isArray(actual) || actual.length !== expect.length)
        return fail("not an array of that length");
      expect.forEach((e, i) => {
        match(e, actual[i] ?? null, `${path}[${i}]`, inJson);
      });
      return;
    }
    const o = expect as Record<string, unknown>;
    const dollar = Object.keys(o).find((k) => k.startsWith("$"));
    const fields = (a: Captured): Map<string, Captured> | null => {
      if (a instanceof Map) return a;
      if (
        inJson &&
        typeof a === "object" &&
        a !== null &&
        !Array.isArray(a) &&
        !Buffer.isBuffer(a)
      ) {
        return new Map(Object.entries(a as Record<string, Json>));
      }
      return null;
    };
    const object = (entries: Record<string, unknown>, exact: boolean): void => {
      const map = fields(actual);
      if (map === null) {
        fail("not a map");
        return;
      }
      for (const [k, e] of Object.entries(entries)) {
        if (typeof e === "object" && e !== null && "$absent" in e) {
          if (map.has(k)) fail(`key ${k} is present`);
          continue;
        }
        if (!map.has(k)) fail(`key ${k} is missing`);
        match(e, map.get(k) ?? null, `${path}.${k}`, inJson);
      }
      if (exact) {
        const extra = [...map.keys()].filter(
          (k) => !(k in entries) || (entries[k] as { $absent?: boolean } | null)?.$absent === true,
        );
        if (extra.length > 0) fail(`unexpected keys ${extra.join(", ")}`);
      }
    };
    if (dollar === undefined) {
      object(o, true);
      return;
    }
    const num = (): number => {
      const n = numberOf(actual);
      return n === null ? fail("not a number") : n;
    };
    const bound = (v: unknown): number => Number(text(value(v)));
    switch (dollar) {
      case "$any": {
        const t = o.$any as string;
        const ok =
          t === "any" ||
          (t === "string" && (Buffer.isBuffer(actual) || (inJson && typeof actual === "string"))) ||
          (t === "int" && typeof actual === "number" && Number.isInteger(actual)) ||
          (t === "array" && Array.isArray(actual)) ||
          (t === "nil" && actual === null);
        check(ok, `not of type ${t}`);
        return;
      }
      case "$hex":
        check(
          Buffer.isBuffer(actual) && actual.equals(Buffer.from(o.$hex as string, "hex")),
          "other bytes",
        );
        return;
      case "$eq":
        check(num() === bound(o.$eq), "not equal");
        return;
      case "$gte":
        check(num() >= bound(o.$gte), "smaller");
        return;
      case "$lte":
        check(num() <= bound(o.$lte), "larger");
        return;
      case "$between": {
        const [lo, hi] = o.$between as unknown[];
        const n = num();
        check(n >= bound(lo) && n <= bound(hi), "out of range");
        return;
      }
      case "$capture": {
        const name = o.$capture as string;
        if (captured.has(name)) throw new Failure(`${name} captured twice`);
        if ("match" in o) match(o.match, actual, path, inJson);
        captured.set(name, actual);
        return;
      }
      case "$ref": {
        const found = captured.get(o.$ref as string);
        if (found === undefined) throw new Failure(`$ref ${String(o.$ref)} not captured`);
        check(same(found, actual), "not the captured value");
        return;
      }
      case "$split": {
        if (!Buffer.isBuffer(actual)) return fail("not a bulk string");
        const sep = Buffer.from(o.$split as string, "utf8");
        const parts = o.parts as unknown[];
        const pieces: Buffer[] = [];
        let rest = actual;
        for (let i = 0; i < parts.length - 1; i++) {
          const at = rest.indexOf(sep);
          if (at < 0) return fail(`fewer than ${parts.length - 1} separators`);
          pieces.push(rest.subarray(0, at));
          rest = rest.subarray(at + sep.length);
        }
        pieces.push(rest);
        parts.forEach((p, i) => {
          match(p, pieces[i] ?? null, `${path}.part[${i}]`, false);
        });
        return;
      }
      case "$json": {
        if (!Buffer.isBuffer(actual)) return fail("not a bulk string");
        let parsed: Json;
        try {
          parsed = JSON.parse(actual.toString("utf8")) as Json;
        } catch {
          return fail("not JSON");
        }
        match(o.$json, parsed, `${path}.json`, true);
        return;
      }
      case "$unordered": {
        if (!Array.isArray(actual)) return fail("not an array");
        const want = (o.$unordered as unknown[]).map((x) => String(x)).sort();
        const got = actual.map((x) => text(x)).sort();
        check(JSON.stringify(want) === JSON.stringify(got), "other members");
        return;
      }
      case "$subset":
        object(o.$subset as Record<string, unknown>, false);
        return;
      case "$error": {
        const err =
          actual !== null &&
          typeof actual === "object" &&
          !Buffer.isBuffer(actual) &&
          !Array.isArray(actual) &&
          "error" in actual
            ? actual.error
            : null;
        check(typeof err === "string" && err.includes(o.$error as string), "not that error");
        return;
      }
      default:
        throw new Failure(`unknown matcher ${dollar}`);
    }
  };

  for (const [index, step] of c.steps.entries()) {
    const where = `${c.name} step ${index}`;
    try {
      if ("time" in step) {
        const [s, us] = (await client.time()).map(Number);
        captured.set(step.time as string, (s ?? 0) * 1000 + Math.floor((us ?? 0) / 1000));
      } else if ("encode" in step) {
        if (encode === undefined)
          throw new Failure("encode steps need the client's payload writer (runCase's encode)");
        let reply: Reply;
        try {
          reply = Buffer.from(encode(payloadValue(step.encode)), "utf8");
        } catch (error) {
          reply = { error: error instanceof Error ? error.message : String(error) };
        }
        match(step.expect, reply, "reply", false);
      } else if ("call" in step) {
        const script = step.call as string;
        const loaded = bundle.script(script);
        const sha = String(await client.script("LOAD", loaded.source));
        if (sha !== loaded.sha1)
          throw new Failure(`Redis' SHA1 of ${script} is ${sha}, the manifest's ${loaded.sha1}`);
        const args: Record<string, ArgValue> = {};
        for (const [k, v] of Object.entries((step.args ?? {}) as Record<string, unknown>))
          args[k] = v === null ? undefined : value(v);
        const records = ((step.records ?? []) as Record<string, unknown>[]).map((r) =>
          Object.fromEntries(
            Object.entries(r).map(([k, v]) => [k, v === null ? undefined : value(v)]),
          ),
        );
        const argv = bundle.packByName(script, args, records);
        const keys = keysOf(script);
        const reply = await send("EVALSHA", [loaded.sha1, String(keys.length), ...keys, ...argv]);
        const expect: unknown = step.expect;
        const wantsError = typeof expect === "object" && expect !== null && "$error" in expect;
        if (typeof reply === "object" && reply !== null && "error" in reply && !wantsError) {
          throw new Failure(`the call failed: ${reply.error}`);
        }
        match(step.expect, reply, "reply", false);
      } else {
        const kind = "read" in step ? "read" : "write";
        const [command, ref, ...rest] = step[kind] as [string, unknown, ...unknown[]];
        if (!(kind === "read" ? READS : WRITES).has(command))
          throw new Failure(`${kind} ${command} is not allowed`);
        let reply = await send(command, [keyOf(ref), ...rest.map(value)]);
        if (command === "HGETALL" && Array.isArray(reply)) {
          const map = new Map<string, Buffer>();
          for (let i = 0; i < reply.length; i += 2)
            map.set(text(reply[i] as Buffer), reply[i + 1] as Buffer);
          reply = map;
        }
        if ("expect" in step) match(step.expect, reply, "reply", false);
        else if (typeof reply === "object" && reply !== null && "error" in reply)
          throw new Failure(`the write failed: ${reply.error}`);
      }
    } catch (error) {
      if (error instanceof Failure) throw new Error(`${where}: ${error.message}`);
      throw error;
    }
  }
}

function same(a: Captured, b: Captured): boolean {
  if (Array.isArray(a) && Array.isArray(b))
    return a.length === b.length && a.every((x, i) => same(x, b[i] ?? null));
  if (a instanceof Map && b instanceof Map)
    return a.size === b.size && [...a].every(([k, v]) => b.has(k) && same(v, b.get(k) ?? null));
  if (a === null || b === null) return a === b;
  try {
    return text(a) === text(b);
  } catch {
    return JSON.stringify(a) === JSON.stringify(b);
  }
}

function show(value: Captured): string {
  if (Buffer.isBuffer(value)) return JSON.stringify(value.toString("utf8"));
  if (value instanceof Map)
    return JSON.stringify(Object.fromEntries([...value].map(([k, v]) => [k, v.toString("utf8")])));
  if (Array.isArray(value)) return `[${value.map(show).join(", ")}]`;
  return JSON.stringify(value);
}
