/**
 * SIGTERM/SIGINT that reach a worker process before its loop handles them: remembered,
 * never fatal. The bin installs this before it loads the CLI and the worker (their
 * modules can take a second to load on a busy node), so a worker signalled while it
 * starts drains at once with exit 0 instead of dying of the signal.
 *
 * The listener stays for the life of the process and the worker's drain is handed to it
 * (`handOver`): removing a listener drops a signal that arrived but was not dispatched
 * yet (Node stops the signal's watcher with its last listener).
 *
 * @module
 */

let noted = false;
let installed = false;
let target: (() => void) | null = null;
const note = (): void => {
  if (target === null) noted = true;
  else target();
};

/** Note SIGTERM and SIGINT from now on (idempotent). */
export function rememberStopSignals(): void {
  if (installed) return;
  installed = true;
  process.on("SIGTERM", note);
  process.on("SIGINT", note);
}

/** Whether a stop signal was noted so far (a supervisor adds its own listeners, then asks). */
export function stopSignalled(): boolean {
  return noted;
}

/** From now on a stop signal calls `onStop`; called at once if one was noted already. */
export function handOver(onStop: () => void): void {
  rememberStopSignals();
  target = onStop;
  if (noted) {
    noted = false;
    onStop();
  }
}
