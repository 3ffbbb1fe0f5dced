/**
 * The protocol's script bundle: the assembled Lua scripts and their manifest, the same
 * bytes the Python package sends (`worker-image/taskfleet/protocol/bundle/` in the
 * repository, copied into this package's `bundle/` folder at build time).
 *
 * Every call's ARGV is packed here by name from the manifest's declarations: a caller
 * gives `{ name: value }` for the named arguments and a list of records for a repeated
 * group; nothing counts positions by hand. Optional arguments left out are sent as the
 * empty string, as the protocol says.
 *
 * @module
 */

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

import { ProtocolError } from "./errors.js";
import type { ScriptArgs, ScriptName, ScriptRecords } from "./protocol/signatures.js";

/** The protocol version this package speaks (the manifest's `protocol`). */
export const PROTOCOL_VERSION = 1;

/** A value one argument of a script call takes, before it is encoded for the wire. */
export type ArgValue = string | number | Buffer | undefined;

/** One declared argument of a script, as the manifest states it. */
export interface ArgDecl {
  readonly name: string;
  readonly type: "int" | "number" | "string" | "bytes" | "json";
  readonly optional: boolean;
  readonly doc?: string;
}

/** A repeated group: N records of fixed width, last in ARGV; `count` names the int argument holding N. */
export interface RepeatedDecl {
  readonly count: string;
  readonly fields: readonly ArgDecl[];
}

/** One script of the bundle. */
export interface ScriptDecl {
  readonly file: string;
  readonly sha1: string;
  /** The keys the script uses: a call's KEYS, in this order, and no other. */
  readonly uses_keys: readonly string[];
  readonly args: readonly ArgDecl[];
  readonly repeated: RepeatedDecl | null;
  readonly reply?: string;
}

/** One key of a queue (a script receives those of its `uses_keys`). */
export interface KeyDecl {
  readonly name: string;
  readonly suffix: string;
  readonly is_prefix: boolean;
  readonly type?: string;
  readonly doc?: string;
}

/** The manifest of a bundle (`manifest.json`). */
export interface Manifest {
  readonly protocol: number;
  readonly key_prefix: string;
  readonly keys: readonly KeyDecl[];
  readonly scripts: Readonly<Record<string, ScriptDecl>>;
}

/** A loaded script: its declaration and the exact bytes sent to Redis. */
export interface LoadedScript {
  readonly name: string;
  readonly decl: ScriptDecl;
  readonly source: Buffer;
  readonly sha1: string;
}

/** The bundle of one folder: its manifest and every script it declares, checked. */
export class Bundle {
  readonly manifest: Manifest;
  readonly scripts: ReadonlyMap<string, LoadedScript>;

  constructor(manifest: Manifest, scripts: ReadonlyMap<string, LoadedScript>) {
    this.manifest = manifest;
    this.scripts = scripts;
  }

  /** The script `name`; a `ProtocolError` if the bundle has none. */
  script(name: string): LoadedScript {
    const found = this.scripts.get(name);
    if (found === undefined) throw new ProtocolError(`the script bundle has no script ${name}`);
    return found;
  }

  /**
   * ARGV for one call of `script`: its named arguments in declaration order, then the
   * records of its repeated group (whose count argument is filled in from `records`).
   * Unknown names, a missing required argument or a value of the wrong kind throw
   * `ProtocolError`: they are mistakes of this package, not of its caller.
   */
  pack<S extends ScriptName>(
    script: S,
    args: ScriptArgs[S],
    records: readonly ScriptRecords[S][] = [],
  ): (string | Buffer)[] {
    return this.packByName(script, args as Readonly<Record<string, ArgValue>>, records);
  }

  /**
   * `pack` for a caller driven by data (the conformance vectors), whose script and
   * argument names the compiler cannot check: the same checks, at run time only.
   */
  packByName(
    script: string,
    args: Readonly<Record<string, ArgValue>>,
    records: readonly object[] = [],
  ): (string | Buffer)[] {
    const decl = this.script(script).decl;
    const { known, fields } = this.names(script, decl);
    const repeated = decl.repeated;
    if (repeated === null && records.length > 0) {
      throw new ProtocolError(`script ${script} takes no repeated records`);
    }
    for (const name in args) {
      if (!known.has(name)) throw new ProtocolError(`script ${script} has no argument ${name}`);
    }
    const out: (string | Buffer)[] = [];
    for (const a of decl.args) {
      // the repeated group's count, when not given, is the number of records
      const value =
        args[a.name] ??
        (repeated !== null && a.name === repeated.count ? records.length : undefined);
      out.push(encodeArg(script, a, value));
    }
    if (repeated !== null) {
      for (const item of records) {
        const record = item as Readonly<Record<string, ArgValue>>; // a record's fields, by name
        for (const name in record) {
          if (!fields.has(name))
            throw new ProtocolError(`script ${script}'s records have no field ${name}`);
        }
        for (const field of repeated.fields) out.push(encodeArg(script, field, record[field.name]));
      }
    }
    return out;
  }

  private readonly nameSets = new Map<
    string,
    { known: ReadonlySet<string>; fields: ReadonlySet<string> }
  >();

  /** A script's argument and record field names, as sets made once (`pack` runs per call). */
  private names(
    script: string,
    decl: ScriptDecl,
  ): { known: ReadonlySet<string>; fields: ReadonlySet<string> } {
    let sets = this.nameSets.get(script);
    if (sets === undefined) {
      sets = {
        known: new Set(decl.args.map((a) => a.name)),
        fields: new Set((decl.repeated?.fields ?? []).map((f) => f.name)),
      };
      this.nameSets.set(script, sets);
    }
    return sets;
  }
}

const INT = /^-?[0-9]+$/;
const NUMBER = /^(-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?|-?\.[0-9]+([eE][-+]?[0-9]+)?|[-+]?inf)$/;

/** One argument as its wire type says (protocol: an optional one left out is ''). */
function encodeArg(script: string, decl: ArgDecl, value: ArgValue): string | Buffer {
  if (value === undefined) {
    if (decl.optional) return "";
    throw new ProtocolError(`script ${script}: argument ${decl.name} is required`);
  }
  if (
    value === "" &&
    (decl.optional || decl.type === "string" || decl.type === "bytes" || decl.type === "json")
  ) {
    return "";
  }
  switch (decl.type) {
    case "int":
      if (typeof value === "number" && Number.isSafeInteger(value)) return String(value);
      if (typeof value === "string" && INT.test(value)) return value;
      break;
    case "number":
      if (typeof value === "number" && !Number.isNaN(value)) {
        return Number.isFinite(value) ? String(value) : value > 0 ? "inf" : "-inf";
      }
      if (typeof value === "string" && NUMBER.test(value)) return value;
      break;
    case "string":
    case "json":
      if (typeof value === "string") return value;
      break;
    case "bytes":
      if (typeof value === "string" || Buffer.isBuffer(value)) return value;
      break;
  }
  throw new ProtocolError(`script ${script}: argument ${decl.name} is not of type ${decl.type}`);
}

/** The folder of the bundle this package carries. */
export function packagedBundleDir(): string {
  return fileURLToPath(new URL("../../bundle/", import.meta.url));
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function checkArgs(where: string, raw: unknown): ArgDecl[] {
  if (!Array.isArray(raw)) throw new ProtocolError(`manifest: ${where} is not a list`);
  return raw.map((a: unknown, i) => {
    if (!isRecord(a) || typeof a.name !== "string" || typeof a.type !== "string") {
      throw new ProtocolError(`manifest: ${where}[${i}] is not an argument declaration`);
    }
    if (!["int", "number", "string", "bytes", "json"].includes(a.type)) {
      throw new ProtocolError(`manifest: ${where}[${i}] has an unknown type ${a.type}`);
    }
    return { name: a.name, type: a.type as ArgDecl["type"], optional: a.optional === true };
  });
}

/** The manifest's shape checked (what this package reads of it); a `ProtocolError` names what is wrong. */
export function checkManifest(raw: unknown): Manifest {
  if (!isRecord(raw)) throw new ProtocolError("manifest: not a JSON object");
  if (raw.protocol !== PROTOCOL_VERSION) {
    throw new ProtocolError(
      `manifest: protocol ${String(raw.protocol)}; this package speaks protocol ${PROTOCOL_VERSION}`,
    );
  }
  if (typeof raw.key_prefix !== "string" || !raw.key_prefix.includes("%QUEUE%")) {
    throw new ProtocolError("manifest: key_prefix must name the queue (%QUEUE%)");
  }
  if (!Array.isArray(raw.keys) || !isRecord(raw.scripts)) {
    throw new ProtocolError("manifest: keys must be a list and scripts an object");
  }
  const keys = raw.keys.map((k: unknown, i): KeyDecl => {
    if (!isRecord(k) || typeof k.name !== "string" || typeof k.suffix !== "string") {
      throw new ProtocolError(`manifest: keys[${i}] is not a key declaration`);
    }
    return { name: k.name, suffix: k.suffix, is_prefix: k.is_prefix === true };
  });
  const scripts: Record<string, ScriptDecl> = {};
  for (const [name, s] of Object.entries(raw.scripts)) {
    if (!isRecord(s) || typeof s.file !== "string" || typeof s.sha1 !== "string") {
      throw new ProtocolError(`manifest: script ${name} has no file or sha1`);
    }
    let repeated: RepeatedDecl | null = null;
    if (s.repeated !== null && s.repeated !== undefined) {
      if (!isRecord(s.repeated) || typeof s.repeated.count !== "string") {
        throw new ProtocolError(`manifest: script ${name}'s repeated group has no count`);
      }
      repeated = {
        count: s.repeated.count,
        fields: checkArgs(`${name}.repeated.fields`, s.repeated.fields),
      };
    }
    const known = new Set(keys.map((k) => k.name));
    const uses = s.uses_keys;
    if (
      !Array.isArray(uses) ||
      !uses.every((k): k is string => typeof k === "string" && known.has(k))
    ) {
      throw new ProtocolError(
        `manifest: script ${name}'s uses_keys must list keys of the manifest`,
      );
    }
    scripts[name] = {
      file: s.file,
      sha1: s.sha1,
      uses_keys: uses,
      args: checkArgs(`${name}.args`, s.args),
      repeated,
    };
  }
  return { protocol: raw.protocol, key_prefix: raw.key_prefix, keys, scripts };
}

/**
 * Read the bundle in `dir`: its manifest, and each script's bytes, whose SHA1 must be the
 * manifest's (a `ProtocolError` otherwise: a copy that drifted would be refused by no one
 * else, and EVALSHA would then run other bytes than those declared).
 */
export function loadBundle(dir: string = packagedBundleDir()): Bundle {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(`${dir}/manifest.json`, "utf8"));
  } catch (error) {
    throw new ProtocolError(`cannot read the script bundle's manifest in ${dir}: ${String(error)}`);
  }
  const manifest = checkManifest(raw);
  const scripts = new Map<string, LoadedScript>();
  for (const [name, decl] of Object.entries(manifest.scripts)) {
    if (decl.file.includes("/") || decl.file.includes("\\")) {
      throw new ProtocolError(`manifest: script ${name}'s file must be a plain file name`);
    }
    const source = readFileSync(`${dir}/${decl.file}`);
    const sha1 = createHash("sha1").update(source).digest("hex");
    if (sha1 !== decl.sha1) {
      throw new ProtocolError(`script ${name} (${decl.file}) does not match the manifest's sha1`);
    }
    scripts.set(name, { name, decl, source, sha1 });
  }
  return new Bundle(manifest, scripts);
}

let packaged: Bundle | undefined;

/** The bundle this package carries, read once per process. */
export function packagedBundle(): Bundle {
  packaged ??= loadBundle();
  return packaged;
}
