/**
 * Connections and script calls: a client for a URL (one server, or a Redis Cluster with
 * `?cluster=true`), and the bundle's scripts run on it with EVALSHA.
 *
 * ioredis was chosen over node-redis for what this package leans on: a mature `Cluster`
 * that routes each call by its keys (EVALSHA included, from `numkeys`) and follows
 * MOVED/ASK; one connection that pipelines every concurrent call; raw `call()` for
 * commands sent exactly as built here; RESP2 on request, so replies have the same shapes
 * the Python client reads. Scripts are not registered through ioredis' `defineCommand`:
 * the SHA1 is the manifest's, and a server that lost its scripts (restart, SCRIPT FLUSH)
 * answers NOSCRIPT, on which the same call goes out once as EVAL with the bundle's bytes
 * (which also caches the script on the node the call was routed to).
 *
 * @module
 */

import calculateSlot from "cluster-key-slot";
import { Cluster, Redis } from "ioredis";

import type { Bundle } from "./bundle.js";
import { ProtocolError } from "./errors.js";
import type { ParsedRedisURL } from "./redisurl.js";

/** A client of either kind. */
export type Client = Redis | Cluster;

/**
 * Where a script call goes: the KEYS it sends (`QueueKeys`: the queue's keys the script
 * uses; a provider quota's hash for the quota's own scripts), which route it on a cluster.
 */
export interface KeyRoute {
  forScript(script: string): readonly string[];
}

/**
 * Reconnections a call waits through before it fails: a restart of Redis is ridden out
 * (about a second of reconnecting), an outage fails the call instead of holding it for a
 * minute (ioredis' default is 20).
 */
export const RETRIES_PER_CALL = 3;

/** A client for a parsed URL; on a cluster the named node is the seed the rest is found from. */
export function connect(url: ParsedRedisURL): Client {
  const options = {
    ...url.redis,
    protocol: 2 as const,
    lazyConnect: true,
    maxRetriesPerRequest: RETRIES_PER_CALL,
    // a socket that never opened is dropped this soon after close(), not after ioredis' 2 s
    disconnectTimeout: 500,
  };
  let client: Client;
  if (url.cluster) {
    const { host, port, ...node } = options;
    client = new Cluster([{ host: host ?? "127.0.0.1", port: port ?? 6379 }], {
      redisOptions: node,
      lazyConnect: true,
    });
  } else {
    client = new Redis(options);
  }
  quiet(client);
  return client;
}

/** Connection errors reach the caller as the failed call; without a listener ioredis would print each one. */
export function quiet(client: Client): Client {
  client.on("error", () => undefined);
  return client;
}

/** Whether an error is Redis' NOSCRIPT (the server has no script of that SHA1). */
export function isNoScript(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith("NOSCRIPT");
}

/** The bundle's scripts, called on one client. */
export class Scripts {
  readonly client: Client;
  readonly bundle: Bundle;

  constructor(client: Client, bundle: Bundle) {
    this.client = client;
    this.bundle = bundle;
  }

  /** `[sha1, numkeys, ...keys]` of each script and key list, made once (a call adds its argv). */
  private readonly heads = new Map<
    string,
    { keys: readonly string[]; head: readonly (string | number | Buffer)[] }
  >();

  /**
   * One call of `script` on `queue`'s keys (those the script uses: `QueueKeys.forScript`):
   * EVALSHA, or EVAL with the bundle's bytes when the server lost it.
   */
  async run(script: string, queue: KeyRoute, argv: readonly (string | Buffer)[]): Promise<unknown> {
    const loaded = this.bundle.script(script);
    const keys = queue.forScript(script);
    let cached = this.heads.get(script);
    if (cached?.keys !== keys) {
      cached = { keys, head: [loaded.sha1, keys.length, ...keys] };
      this.heads.set(script, cached);
    }
    try {
      return await this.client.call("EVALSHA", cached.head.concat(argv));
    } catch (error) {
      if (!isNoScript(error)) throw error;
      return await this.client.call("EVAL", [loaded.source, keys.length, ...keys, ...argv]);
    }
  }

  /**
   * `run`, then WAIT for `replicas` on the same connection, in one pipeline; returns the
   * reply and how many replicas confirmed. A WAIT that times out leaves the write on the
   * master: the caller says so.
   */
  async runAndWait(
    script: string,
    queue: KeyRoute,
    argv: readonly (string | Buffer)[],
    replicas: number,
    timeoutMs: number,
  ): Promise<[unknown, number]> {
    const loaded = this.bundle.script(script);
    const keys = queue.forScript(script);
    const send = async (command: "EVALSHA" | "EVAL"): Promise<[Error | null, unknown][]> => {
      const head = command === "EVALSHA" ? loaded.sha1 : loaded.source;
      const pipe = this.client.pipeline();
      pipe.call(command, [head, keys.length, ...keys, ...argv]);
      pipe.call("WAIT", [replicas, timeoutMs]);
      const replies = await pipe.exec();
      if (replies?.length !== 2) throw new ProtocolError("WAIT: the pipeline gave no replies");
      return replies;
    };
    let replies = await send("EVALSHA");
    if (isNoScript(replies[0]?.[0])) replies = await send("EVAL");
    const [[error, raw] = [null, null], [waitError, acked] = [null, 0]] = replies;
    if (error !== null) throw error;
    if (waitError !== null) throw waitError;
    return [raw, Number(acked)];
  }
}

/** The node that holds `key`'s slot: the client itself on one server. */
function nodeOf(client: Client, key: string): Redis {
  if (client instanceof Redis) return client;
  const master = client.slots[calculateSlot(key)]?.[0];
  const found = client
    .nodes("master")
    .find((n) => `${n.options.host ?? ""}:${n.options.port ?? 6379}` === master);
  if (found === undefined) throw new ProtocolError(`no master is known for the slot of ${key}`);
  return found;
}

/** The clock of the server that holds `key` (every score and deadline of its queue uses it), in ms. */
export async function serverMs(client: Client, key: string): Promise<number> {
  if (client instanceof Cluster && client.status !== "ready") await client.ping(); // the slot map comes with ready
  const [seconds, micros] = await nodeOf(client, key).time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}
