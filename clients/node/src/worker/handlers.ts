/**
 * The handlers a worker serves, by task name, and loading them from `--handler` values,
 * as the Python worker does (`worker/named.py`, `worker/handlers.py`). A value is one of:
 *
 * - `module:export`: the default handler, for tasks enqueued without a name;
 * - `NAME=module:export`: the handler of tasks enqueued with `name: "NAME"`;
 * - `module:REGISTRY` where `REGISTRY` is an object (or `Map`) of names to functions: one
 *   named handler per entry.
 *
 * `module` is a path (`./handlers.js`, `/app/dist/tasks.mjs`; relative ones from the
 * worker's `--app-dir`) or a package name resolved from there; ES modules and CommonJS
 * both load (`import()`), and a CommonJS module's `module.exports` is looked in too.
 * `export` may be dotted (`tasks.resize`). Everything is resolved at start: a typo fails
 * the worker with one line before Redis is touched. A claimed task whose name this worker
 * does not serve goes dead at once, reason `unknown task`.
 *
 * @module
 */

import { existsSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { isAbsolute, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

import { TaskfleetError, pyRepr } from "../errors.js";
import { taskNameProblem } from "../encoding.js";
import { Served } from "./claimed.js";
import type { TaskContext } from "./context.js";
import { formatError } from "./failures.js";

/**
 * A task handler: its payload and its task's context in; the result (JSON data, or a
 * promise of it) out. Typed by `Worker<Payload, Result>`; untyped, a payload is an object
 * of unknown fields.
 */
export type HandlerFn<Payload = Record<string, unknown>, Result = unknown> = (
  payload: Payload,
  task: TaskContext<Payload, Result>,
) => Result | Promise<Result>;

/** A resolved handler and what it was given as. */
export interface Handler {
  readonly ref: string;
  readonly fn: HandlerFn;
}

/** The handler reference can't be resolved to a function (the message says why). */
export class HandlerLoadError extends TaskfleetError {}

/** A worker's handlers: `default` for tasks without a name, `named` by task name. */
export class HandlerSet {
  constructor(
    readonly defaultHandler: Handler | null,
    readonly named: ReadonlyMap<string, Handler>,
  ) {
    if (defaultHandler === null && named.size === 0) throw new HandlerLoadError("no handler given");
    for (const [name, handler] of named) {
      const problem = taskNameProblem(name);
      if (problem !== undefined)
        throw new HandlerLoadError(`handler ${pyRepr(handler.ref)}: ${problem}`);
    }
  }

  /** Handlers given as functions: `handler` for tasks without a name, `handlers` by name. */
  static of(
    handler: HandlerFn | undefined,
    handlers: Readonly<Record<string, HandlerFn>> | undefined,
  ): HandlerSet {
    const check = (fn: unknown, what: string): HandlerFn => {
      if (typeof fn !== "function")
        throw new HandlerLoadError(`${what} is a ${kind(fn)}, not a function`);
      return fn as HandlerFn;
    };
    const named = new Map<string, Handler>();
    for (const [name, fn] of Object.entries(handlers ?? {}))
      named.set(name, { ref: name, fn: check(fn, `handler ${pyRepr(name)}`) });
    const fallback =
      handler === undefined
        ? null
        : { ref: handler.name || "handler", fn: check(handler, "handler") };
    return new HandlerSet(fallback, named);
  }

  forTask(name: string | null): Handler | null {
    return name === null ? this.defaultHandler : (this.named.get(name) ?? null);
  }

  get served(): Served {
    return new Served(new Set(this.named.keys()), this.defaultHandler !== null);
  }

  /** What the worker runs, for its log line and metrics: `mod:f`, then `name=mod:f` entries. */
  get ref(): string {
    const parts = this.defaultHandler === null ? [] : [this.defaultHandler.ref];
    for (const name of [...this.named.keys()].sort())
      parts.push(`${name}=${this.named.get(name)?.ref ?? ""}`);
    return parts.join(" ");
  }
}

function kind(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}

/** The folder handlers are loaded from: `directory`, or the current one; a `HandlerLoadError` if it is none. */
export function appDir(directory: string | undefined): string {
  let path: string;
  try {
    path = resolve(directory !== undefined && directory !== "" ? directory : process.cwd());
  } catch {
    throw new HandlerLoadError("the current directory no longer exists: set --app-dir");
  }
  if (!existsSync(path) || !statSync(path).isDirectory()) {
    throw new HandlerLoadError(`--app-dir ${pyRepr(directory ?? path)} is not a directory`);
  }
  return path;
}

function moduleUrl(specifier: string, dir: string): string {
  if (specifier.startsWith("file:")) return specifier;
  if (
    specifier === "." ||
    specifier.startsWith("./") ||
    specifier.startsWith("../") ||
    isAbsolute(specifier)
  ) {
    return pathToFileURL(resolve(dir, specifier)).href;
  }
  try {
    return pathToFileURL(createRequire(join(dir, "noop.js")).resolve(specifier)).href;
  } catch {
    throw new HandlerLoadError(
      `handler module ${pyRepr(specifier)} not found: looked in ${dir} (the worker's --app-dir) and its node_modules`,
    );
  }
}

function isMissing(error: unknown, url: string): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (code !== "ERR_MODULE_NOT_FOUND" && code !== "MODULE_NOT_FOUND") return false;
  const message = error instanceof Error ? error.message : "";
  return message.includes(decodeURIComponent(new URL(url).pathname));
}

/** The object `module:export` names (a function, or a registry of them). */
export async function resolveHandler(ref: string, dir: string): Promise<unknown> {
  const colon = ref.lastIndexOf(":");
  const specifier = colon < 0 ? "" : ref.slice(0, colon);
  const path = colon < 0 ? "" : ref.slice(colon + 1);
  if (specifier === "" || path === "" || specifier === "file") {
    throw new HandlerLoadError(`handler ${pyRepr(ref)} must look like './module.js:exportName'`);
  }
  const url = moduleUrl(specifier, dir);
  let namespace: Record<string, unknown>;
  try {
    namespace = (await import(url)) as Record<string, unknown>;
  } catch (error) {
    if (isMissing(error, url)) {
      throw new HandlerLoadError(
        `handler module ${pyRepr(specifier)} not found: looked in ${dir} (the worker's --app-dir)`,
      );
    }
    throw new HandlerLoadError(
      `handler module ${pyRepr(specifier)} failed to import: ${formatError(error)}`,
    );
  }
  let found: unknown = namespace;
  const parts = path.split(".");
  parts.forEach((part, i) => {
    const holder = found as Record<string, unknown> | null;
    let next: unknown = undefined;
    if (
      holder !== null &&
      (typeof holder === "object" || typeof holder === "function") &&
      part in holder
    ) {
      next = holder[part];
    } else if (i === 0) {
      // a CommonJS module: its module.exports is the namespace's default
      const exported = namespace.default as Record<string, unknown> | null | undefined;
      if (
        exported !== null &&
        (typeof exported === "object" || typeof exported === "function") &&
        part in exported
      ) {
        next = exported[part];
      }
    }
    if (next === undefined) {
      throw new HandlerLoadError(
        `handler ${pyRepr(ref)}: module ${pyRepr(specifier)} has no export ${pyRepr(path)}`,
      );
    }
    found = next;
  });
  return found;
}

function registryEntries(value: unknown): [string, unknown][] | null {
  if (value instanceof Map)
    return [...(value as Map<unknown, unknown>).entries()].map(([k, v]) => [String(k), v]);
  if (typeof value === "object" && value !== null && !Array.isArray(value))
    return Object.entries(value);
  return null;
}

/** The handlers of `--handler` values (see the module's doc); `HandlerLoadError` says what is wrong. */
export async function loadHandlers(values: readonly string[], dir: string): Promise<HandlerSet> {
  let fallback: Handler | null = null;
  const named = new Map<string, Handler>();
  const add = (name: string, handler: Handler): void => {
    const problem = taskNameProblem(name);
    if (problem !== undefined)
      throw new HandlerLoadError(`handler ${pyRepr(handler.ref)}: ${problem}`);
    if (named.has(name)) throw new HandlerLoadError(`task name ${pyRepr(name)} has two handlers`);
    named.set(name, handler);
  };
  const callable = (ref: string, value: unknown): Handler => {
    if (typeof value !== "function")
      throw new HandlerLoadError(`handler ${pyRepr(ref)} is a ${kind(value)}, not callable`);
    return { ref, fn: value as HandlerFn };
  };
  for (const value of values) {
    const eq = value.indexOf("=");
    if (eq >= 0) {
      const ref = value.slice(eq + 1);
      add(value.slice(0, eq), callable(ref, await resolveHandler(ref, dir)));
      continue;
    }
    const found = await resolveHandler(value, dir);
    const entries = typeof found === "function" ? null : registryEntries(found);
    if (entries !== null) {
      if (entries.length === 0)
        throw new HandlerLoadError(`handler registry ${pyRepr(value)} is empty`);
      for (const [key, fn] of entries) add(key, callable(`${value}[${pyRepr(key)}]`, fn));
      continue;
    }
    if (fallback !== null) {
      throw new HandlerLoadError(
        `two handlers for tasks without a name: ${pyRepr(fallback.ref)} and ${pyRepr(value)} ` +
          "(give one a name: NAME=module:export)",
      );
    }
    fallback = callable(value, found);
  }
  return new HandlerSet(fallback, named);
}
