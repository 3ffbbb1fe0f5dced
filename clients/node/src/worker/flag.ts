/**
 * `Flag`: a settable, clearable condition that async code waits on (asyncio's `Event`),
 * and the waits built on it. Every wait cleans up after itself: no listener or timer
 * outlives it, however often a loop waits on a flag that is never set.
 *
 * @module
 */

type Listener = () => void;

/** A condition to wait on: `set()` wakes every waiter; `wait()` returns at once while set. */
export class Flag {
  private value = false;
  private readonly listeners = new Set<Listener>();

  isSet(): boolean {
    return this.value;
  }

  set(): void {
    if (this.value) return;
    this.value = true;
    const woken = [...this.listeners];
    this.listeners.clear();
    for (const listener of woken) listener();
  }

  clear(): void {
    this.value = false;
  }

  /** Resolves once the flag is set (at once if it is). */
  async wait(): Promise<void> {
    await waitAny([this]);
  }

  /** Call `listener` once when the flag is next set; returns the undo. */
  listen(listener: Listener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

/** A wait on flags and a time limit, which its owner may also end early (`cancel`). */
function armed(
  flags: readonly Flag[],
  limitMs: number | undefined,
): { promise: Promise<void>; cancel: () => void } {
  let cancel = (): void => undefined;
  const promise = new Promise<void>((resolve) => {
    if (flags.some((f) => f.isSet())) {
      resolve();
      return;
    }
    const undo: (() => void)[] = [];
    let timer: NodeJS.Timeout | undefined;
    cancel = (): void => {
      for (const u of undo) u();
      if (timer !== undefined) clearTimeout(timer);
      resolve();
    };
    for (const flag of flags) undo.push(flag.listen(cancel));
    if (limitMs !== undefined) timer = setTimeout(cancel, Math.max(0, limitMs));
  });
  return { promise, cancel };
}

/** Resolves when any of `flags` is set, or after `limitMs` (undefined: no limit). */
export function waitAny(flags: readonly Flag[], limitMs?: number): Promise<void> {
  return armed(flags, limitMs).promise;
}

/** Resolves after `ms`, or earlier when any of `flags` is set. */
export function sleep(ms: number, ...flags: Flag[]): Promise<void> {
  return waitAny(flags, ms);
}

/**
 * `promise`'s value as `{ value }`, or undefined once any of `flags` is set first; its
 * error is thrown unless a flag cut it short (then it is nobody's and swallowed).
 */
export async function until<T>(
  promise: Promise<T>,
  ...flags: Flag[]
): Promise<{ value: T } | undefined> {
  const cut = armed(flags, undefined);
  let isCut = false;
  try {
    return await Promise.race([
      promise.then(
        (value) => ({ value }),
        (error: unknown) => {
          if (isCut) return undefined;
          throw error;
        },
      ),
      cut.promise.then(() => {
        isCut = true;
        return undefined;
      }),
    ]);
  } finally {
    cut.cancel();
  }
}

/** `promise`, or a rejection with `error()` after `ms` (the promise's later outcome is ignored). */
export async function bounded<T>(promise: Promise<T>, ms: number, error: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(error());
    }, ms);
  });
  promise.catch(() => undefined); // a late failure after the bound is nobody's
  try {
    return await Promise.race([promise, limit]);
  } finally {
    clearTimeout(timer);
  }
}
