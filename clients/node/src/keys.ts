/**
 * The key names of one queue, from the bundle's manifest (`key_prefix` and `keys`): no
 * key name is spelt in this package, and every script receives all of them in the
 * manifest's order. Every key of a queue shares the hash tag `{<queue>}`, so a queue
 * lives on one slot of a Redis Cluster.
 *
 * @module
 */

import type { Bundle } from "./bundle.js";
import { InvalidArgument, ProtocolError, pyRepr } from "./errors.js";

// Hash-tag braces would split the queue over slots; ':' and whitespace make keys ambiguous.
const QUEUE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;

/** `name` if it is a valid queue name, else an `InvalidArgument` saying what to use. */
export function validateQueueName(name: unknown): string {
  if (typeof name !== "string" || !QUEUE_NAME.test(name)) {
    const shown = typeof name === "string" ? pyRepr(name.length > 60 ? `${name.slice(0, 60)}...` : name) : typeof name;
    throw new InvalidArgument(
      `invalid queue name ${shown}: use 1-200 characters of letters, digits, '.', '_' ` +
        "or '-', starting with a letter or digit",
    );
  }
  return name;
}

/** Key names of one queue. */
export class QueueKeys {
  readonly queue: string;
  /** The prefix every key of the queue starts with. */
  readonly prefix: string;
  /** KEYS of every script call, in the manifest's order. */
  readonly scriptKeys: readonly string[];
  private readonly byName: ReadonlyMap<string, string>;

  constructor(queue: string, bundle: Bundle) {
    this.queue = validateQueueName(queue);
    this.prefix = bundle.manifest.key_prefix.replace("%QUEUE%", queue);
    const byName = new Map<string, string>();
    for (const key of bundle.manifest.keys) byName.set(key.name, this.prefix + key.suffix);
    this.byName = byName;
    this.scriptKeys = bundle.manifest.keys.map((k) => this.prefix + k.suffix);
  }

  /** The key (or key prefix) the manifest calls `name`. */
  key(name: string): string {
    const found = this.byName.get(name);
    if (found === undefined) throw new ProtocolError(`the script bundle declares no key ${name}`);
    return found;
  }

  /** A prefixed key: the manifest's prefix key `name` followed by `id`. */
  item(name: string, id: string): string {
    return this.key(name) + id;
  }

  /** A SCAN pattern matching every key of the queue (braces are literal in globs). */
  get pattern(): string {
    return `${this.prefix.replace(/[{}*?[\]\\]/g, (c) => `\\${c}`)}*`;
  }
}
