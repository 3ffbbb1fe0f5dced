/**
 * The Redis server's settings that decide whether it keeps tasks, read by one probe (the
 * Python client's `taskfleet.protocol.serverprobe`): the eviction policy, the version and
 * persistence (AOF, RDB snapshots). `CONFIG GET` answers first (managed services often
 * refuse it); `INFO` answers the rest, and the policy when `CONFIG` is refused. A field no
 * command answered is null: the caller decides what an unknown setting means.
 *
 * @module
 */

import type { Client } from "../connection.js";

/** The only `maxmemory-policy` that keeps the queue's promise: a full Redis refuses writes. */
export const SAFE_EVICTION_POLICY = "noeviction";

/** What the server said of itself (null: it did not say). */
export interface ServerSettings {
  readonly evictionPolicy: string | null;
  readonly version: string | null;
  readonly aof: boolean | null;
  readonly rdb: boolean | null;
}

/** Known to delete keys when full (a policy other than `noeviction`). */
export function evicts(settings: ServerSettings): boolean {
  return settings.evictionPolicy !== null && settings.evictionPolicy !== SAFE_EVICTION_POLICY;
}

/** The settings from `CONFIG GET`'s pairs (merged; null: refused) and `INFO`'s text. */
export function settingsOf(
  config: Readonly<Record<string, string>> | null,
  info: string | null,
): ServerSettings {
  const facts = new Map<string, string>();
  for (const line of (info ?? "").split(/\r?\n/)) {
    const at = line.indexOf(":");
    if (at > 0 && !line.startsWith("#")) facts.set(line.slice(0, at), line.slice(at + 1).trim());
  }
  const policy = config?.["maxmemory-policy"] || facts.get("maxmemory_policy") || null;
  const aof = facts.get("aof_enabled");
  const save = config?.save;
  return {
    evictionPolicy: policy,
    version: facts.get("redis_version") || null,
    aof: aof === undefined ? null : aof !== "0",
    rdb: save === undefined ? null : save.trim() !== "",
  };
}

/** How the caller runs each command (a bound on its wait) and which errors mean "refused". */
export interface ProbeOptions {
  readonly ask?: <T>(reply: Promise<T>) => Promise<T>;
  /** Whether an error means "refused: go on without its answer" (else thrown); default: all. */
  readonly refused?: (error: unknown) => boolean;
}

/** Ask the server (on a cluster: the node ioredis picks) for its settings. */
export async function probeServer(
  client: Client,
  options: ProbeOptions = {},
): Promise<ServerSettings> {
  const ask = options.ask ?? (<T>(reply: Promise<T>): Promise<T> => reply);
  const refused = options.refused ?? ((): boolean => true);
  const answer = async (command: string, args: (string | number)[]): Promise<unknown> => {
    try {
      return await ask(client.call(command, args));
    } catch (error) {
      if (!refused(error)) throw error;
      return null;
    }
  };
  let config: Record<string, string> | null = null;
  for (const parameter of ["maxmemory-policy", "save"]) {
    const pairs = await answer("CONFIG", ["GET", parameter]);
    if (Array.isArray(pairs)) {
      config ??= {};
      for (let i = 0; i + 1 < pairs.length; i += 2) config[String(pairs[i])] = String(pairs[i + 1]);
    }
  }
  const info = await answer("INFO", []);
  const text = typeof info === "string" ? info : Buffer.isBuffer(info) ? info.toString() : null;
  return settingsOf(config, text);
}
