/**
 * Redis URLs: the forms and query parameters the Python package takes
 * (`protocol/redisurl.py`), checked the same way and turned into ioredis options. A URL
 * is refused with one line saying what to fix, never quoting the URL or a value.
 *
 * @module
 */

import { readFileSync } from "node:fs";
import type { ConnectionOptions } from "node:tls";

import type { RedisOptions } from "ioredis";

import { InvalidRedisURL } from "./errors.js";

/** What taskfleet reads from a URL besides where the server is. */
export interface TaskfleetURLOptions {
  /** `?cluster=true`: the host is one node of a Redis Cluster. */
  readonly cluster: boolean;
  /** `?wait_replicas=N`: each enqueue waits (WAIT) for N replicas. */
  readonly waitReplicas: number;
  /** `?wait_timeout_ms=T`: how long that wait may take (default 1000; 0 waits for ever). */
  readonly waitTimeoutMs: number;
}

/** A checked URL: the ioredis options it stands for and taskfleet's own options. */
export interface ParsedRedisURL extends TaskfleetURLOptions {
  readonly redis: RedisOptions;
}

const MAX_SOCKET_TIMEOUT_S = 3600;

type Check = (value: string) => void;

function boolean(value: string): void {
  if (!["true", "false", "yes", "no", "1", "0", "y", "n", "t", "f"].includes(value.toLowerCase())) {
    throw new Error("must be true or false");
  }
}

function truthy(value: string | undefined): boolean {
  return value !== undefined && ["true", "yes", "1", "y", "t"].includes(value.toLowerCase());
}

function number(
  low: number,
  high: number,
  opts: { integer?: boolean; openLow?: boolean } = {},
): Check {
  const shape =
    opts.integer === true ? /^-?[0-9]{1,20}$/ : /^-?([0-9]{1,20}(\.[0-9]{0,20})?|\.[0-9]{1,20})$/;
  return (value) => {
    if (!shape.test(value))
      throw new Error(opts.integer === true ? "must be a whole number" : "must be a number");
    const n = Number(value);
    if (n < low || (opts.openLow === true && n === low)) {
      throw new Error(`must be ${opts.openLow === true ? "above" : "at least"} ${low}`);
    }
    if (n > high) throw new Error(`must be at most ${high}`);
  };
}

const text: Check = () => undefined;

const OPTIONS: Record<string, Check> = {
  db: number(0, 2 ** 31 - 1, { integer: true }),
  socket_timeout: number(0, MAX_SOCKET_TIMEOUT_S, { openLow: true }),
  socket_connect_timeout: number(0, MAX_SOCKET_TIMEOUT_S, { openLow: true }),
  socket_keepalive: boolean,
  retry_on_timeout: boolean,
  health_check_interval: number(0, MAX_SOCKET_TIMEOUT_S, { integer: true }),
  max_connections: number(1, 100_000, { integer: true }),
  client_name: text,
  protocol: (value) => {
    if (value !== "2" && value !== "3") throw new Error("must be 2 or 3");
  },
  cluster: boolean,
  wait_replicas: number(0, 1000, { integer: true }),
  wait_timeout_ms: number(0, MAX_SOCKET_TIMEOUT_S * 1000, { integer: true }),
};

const TLS_OPTIONS: Record<string, Check> = {
  ssl_cert_reqs: (value) => {
    if (!["none", "optional", "required"].includes(value.toLowerCase())) {
      throw new Error("must be one of none, optional, required");
    }
  },
  ssl_check_hostname: boolean,
  ssl_ca_certs: text,
  ssl_ca_path: text,
  ssl_certfile: text,
  ssl_keyfile: text,
};

const CREDENTIALS = ["username", "password", "ssl_password"];
const SAFE_NAME = /^[A-Za-z0-9_.-]{1,40}$/;
const HOST = /^([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])$/;
// eslint-disable-next-line no-control-regex -- refusing control characters is the point
const CONTROL = /[\x00-\x20\x7f]/;

function keyShown(key: string): string {
  return SAFE_NAME.test(key) ? `'${key}'` : "with an unusual name";
}

function decode(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    throw new InvalidRedisURL("the Redis URL has a malformed percent-encoding");
  }
}

/**
 * Check `url` and turn it into ioredis options; `InvalidRedisURL` says what to fix.
 * Accepts `redis://[user:password@]host[:port][/db][?...]`, `rediss://` (TLS) and
 * `unix:///path/to/socket[?db=N]`, with the Python package's query parameters.
 */
export function parseRedisURL(url: string): ParsedRedisURL {
  if (typeof url !== "string") throw new InvalidRedisURL("a Redis URL must be a string");
  const scheme = url.includes("://") ? url.slice(0, url.indexOf("://")) : "";
  if (!["redis", "rediss", "unix"].includes(scheme)) {
    throw new InvalidRedisURL(
      "a Redis URL must start with redis://, rediss:// or unix:// (lower case)",
    );
  }
  if (CONTROL.test(url))
    throw new InvalidRedisURL("a Redis URL must not contain spaces or control characters");
  if (url.includes("#")) {
    throw new InvalidRedisURL(
      "a Redis URL must not have a #fragment (percent-encode a # in a password as %23)",
    );
  }
  let parts: URL;
  try {
    parts = new URL(url);
  } catch {
    throw new InvalidRedisURL(
      "the Redis URL's host or port is malformed (the port must be a number from 1 " +
        "to 65535; percent-encode @ : / ? # in a user name or password)",
    );
  }
  const redis: RedisOptions = {};
  if (parts.username !== "") redis.username = decode(parts.username);
  if (parts.password !== "") redis.password = decode(parts.password);
  let db: number | undefined;
  if (scheme === "unix") {
    if (parts.hostname !== "" || parts.port !== "") {
      throw new InvalidRedisURL(
        "a unix:// URL names a socket path, not a host: unix:///path/to/redis.sock",
      );
    }
    const path = decode(parts.pathname);
    if (!path.startsWith("/") || path === "/") {
      throw new InvalidRedisURL("a unix:// URL needs an absolute socket path: unix:///path");
    }
    redis.path = path;
  } else {
    if (parts.hostname === "")
      throw new InvalidRedisURL(`the Redis URL names no host: ${scheme}://HOST[:PORT][/DB]`);
    const host = decode(parts.hostname);
    if (!HOST.test(host))
      throw new InvalidRedisURL("the Redis URL's host is not a host name or IP address");
    if (parts.port === "0")
      throw new InvalidRedisURL("the Redis URL's port must be from 1 to 65535");
    redis.host = host.startsWith("[") ? host.slice(1, -1) : host;
    redis.port = parts.port === "" ? 6379 : Number(parts.port);
    if (parts.pathname !== "" && parts.pathname !== "/") {
      const match = /^\/([0-9]{1,9})$/.exec(parts.pathname);
      if (match?.[1] === undefined) {
        throw new InvalidRedisURL(
          "the Redis URL's database (the path after the host) must be a whole " +
            `number from 0, as in ${scheme}://host:6379/0`,
        );
      }
      db = Number(match[1]);
    }
  }
  const options = new Map<string, string>();
  const query = parts.search.startsWith("?") ? parts.search.slice(1) : parts.search;
  for (const field of query.split(/[&;]/)) {
    if (field === "") continue;
    const eq = field.indexOf("=");
    const key = decode((eq < 0 ? field : field.slice(0, eq)).replaceAll("+", " "));
    const value = decode((eq < 0 ? "" : field.slice(eq + 1)).replaceAll("+", " "));
    if (options.has(key))
      throw new InvalidRedisURL(`the Redis URL gives query parameter ${keyShown(key)} twice`);
    options.set(key, value);
    if (CREDENTIALS.includes(key)) {
      if (key === "password" && redis.password !== undefined) {
        throw new InvalidRedisURL("the Redis URL gives a password twice (user info and query)");
      }
      if (key === "username" && redis.username !== undefined) {
        throw new InvalidRedisURL("the Redis URL gives a user name twice (user info and query)");
      }
      if (value === "")
        throw new InvalidRedisURL(`query parameter ${key} of the Redis URL has no value`);
      continue;
    }
    const check = OPTIONS[key] ?? (scheme === "rediss" ? TLS_OPTIONS[key] : undefined);
    if (check === undefined || (scheme === "unix" && key === "socket_keepalive")) {
      if (key in TLS_OPTIONS)
        throw new InvalidRedisURL(`query parameter ${key} needs a rediss:// URL`);
      throw new InvalidRedisURL(`unknown query parameter ${keyShown(key)} in the Redis URL`);
    }
    try {
      check(value);
    } catch (error) {
      throw new InvalidRedisURL(
        `query parameter ${key} of the Redis URL ${(error as Error).message}`,
      );
    }
  }
  const get = (key: string): string | undefined => options.get(key);
  const cluster = truthy(get("cluster"));
  if (cluster && scheme === "unix") {
    throw new InvalidRedisURL("cluster=true needs a redis:// or rediss:// URL, not unix://");
  }
  const queryDb = get("db");
  if (queryDb !== undefined && db !== undefined) {
    throw new InvalidRedisURL("the Redis URL names the database twice (path and ?db=)");
  }
  db ??= queryDb === undefined ? undefined : Number(queryDb);
  if (cluster && (db ?? 0) !== 0) {
    throw new InvalidRedisURL("a Redis Cluster has database 0 only: drop the database or use /0");
  }
  if (get("wait_timeout_ms") !== undefined && get("wait_replicas") === undefined) {
    throw new InvalidRedisURL("query parameter wait_timeout_ms needs wait_replicas");
  }
  if (db !== undefined) redis.db = db;
  const username = get("username");
  const password = get("password");
  if (username !== undefined) redis.username = username;
  if (password !== undefined) redis.password = password;
  const socketTimeout = get("socket_timeout");
  if (socketTimeout !== undefined) redis.commandTimeout = Math.ceil(Number(socketTimeout) * 1000);
  const connectTimeout = get("socket_connect_timeout");
  if (connectTimeout !== undefined) redis.connectTimeout = Math.ceil(Number(connectTimeout) * 1000);
  const keepalive = get("socket_keepalive");
  if (keepalive !== undefined) redis.keepAlive = truthy(keepalive) ? 30_000 : 0;
  const clientName = get("client_name");
  if (clientName !== undefined) redis.connectionName = clientName;
  if (scheme === "rediss") redis.tls = tlsOptions(options);
  return {
    redis,
    cluster,
    waitReplicas: Number(get("wait_replicas") ?? "0"),
    waitTimeoutMs: Number(get("wait_timeout_ms") ?? "1000"),
  };
}

function tlsOptions(options: ReadonlyMap<string, string>): ConnectionOptions {
  const tls: ConnectionOptions = {};
  const read = (key: string): Buffer => {
    const path = options.get(key) ?? "";
    try {
      return readFileSync(path);
    } catch {
      throw new InvalidRedisURL(
        `query parameter ${key} of the Redis URL names a file that cannot be read`,
      );
    }
  };
  const reqs = options.get("ssl_cert_reqs")?.toLowerCase();
  if (reqs === "none" || reqs === "optional") tls.rejectUnauthorized = false;
  const checkHostname = options.get("ssl_check_hostname");
  if (checkHostname !== undefined && !truthy(checkHostname))
    tls.checkServerIdentity = () => undefined;
  if (options.has("ssl_ca_path")) {
    throw new InvalidRedisURL(
      "query parameter ssl_ca_path is not supported by the Node.js client; use ssl_ca_certs",
    );
  }
  if (options.has("ssl_ca_certs")) tls.ca = read("ssl_ca_certs");
  if (options.has("ssl_certfile")) tls.cert = read("ssl_certfile");
  if (options.has("ssl_keyfile")) tls.key = read("ssl_keyfile");
  const passphrase = options.get("ssl_password");
  if (passphrase !== undefined) tls.passphrase = passphrase;
  return tls;
}
