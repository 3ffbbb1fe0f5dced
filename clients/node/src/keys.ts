/**
 * The key names of one queue, from the bundle's manifest (`key_prefix` and `keys`): no
 * key name is spelt in this package, and a script receives only the keys it uses (its
 * `uses_keys`, in that order: `forScript`). Every key of a queue shares the hash tag `{<queue>}`, so a queue
 * lives on one slot of a Redis Cluster.
 *
 * @module
 */

import type { Bundle } from "./bundle.js";
import { InvalidArgument, ProtocolError, pyRepr } from "./errors.js";
import type { KeyName } from "./protocol/layout.js";

// Hash-tag braces would split the queue over slots; ':' and whitespace make keys ambiguous.
const QUEUE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;

/** `name` if it is a valid queue name, else an `InvalidArgument` saying what to use. */
export function validateQueueName(name: unknown): string {
  if (typeof name !== "string" || !QUEUE_NAME.test(name)) {
    const shown =
      typeof name === "string"
        ? pyRepr(name.length > 60 ? `${name.slice(0, 60)}...` : name)
        : typeof name;
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
  private readonly byName: ReadonlyMap<string, string>;
  private readonly bundle: Bundle;
  private readonly byScript = new Map<string, readonly string[]>();

  constructor(queue: string, bundle: Bundle) {
    this.queue = validateQueueName(queue);
    this.prefix = bundle.manifest.key_prefix.replace("%QUEUE%", queue);
    const byName = new Map<string, string>();
    for (const key of bundle.manifest.keys) byName.set(key.name, this.prefix + key.suffix);
    this.byName = byName;
    this.bundle = bundle;
  }

  /** KEYS of a call of `script`: the keys it uses, in its `uses_keys` order (made once). */
  forScript(script: string): readonly string[] {
    let found = this.byScript.get(script);
    if (found === undefined) {
      found = this.bundle.script(script).decl.uses_keys.map((k) => this.key(k as KeyName));
      this.byScript.set(script, found);
    }
    return found;
  }

  /** The key (or key prefix) the manifest calls `name`. */
  key(name: KeyName): string {
    const found = this.byName.get(name);
    if (found === undefined) throw new ProtocolError(`the script bundle declares no key ${name}`);
    return found;
  }

  /** A prefixed key: the manifest's prefix key `name` followed by `id`. */
  item(name: KeyName, id: string): string {
    return this.key(name) + id;
  }

  /** A SCAN pattern matching every key of the queue (braces are literal in globs). */
  get pattern(): string {
    return `${this.prefix.replace(/[{}*?[\]\\]/g, (c) => `\\${c}`)}*`;
  }
}
