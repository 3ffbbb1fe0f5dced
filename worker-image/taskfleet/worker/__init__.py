"""The worker: ``taskfleet worker`` claims a queue's tasks, runs them, heartbeats, drains.

One idea per module:

- ``settings``: ``WorkerSettings``, what ``taskfleet worker`` takes, validated;
- ``slots``: how many tasks to claim (free slots, prefetch room): pure arithmetic;
- ``lifecycle``: the worker's phases (``Lifecycle``), what its loops wait on;
- ``runs``: a held task (``Run``) and its state (``RunState``), its ``Outcome``, the
  worker's counters;
- ``machine``: the legal transitions of both, declared as tables and checked;
- ``timings``: the per-task and per-claim histograms the loop writes (``metrics``
  serves them);
- ``execution``: how runs run (async handlers on the loop, sync ones on ``threads``),
  timeouts, lost leases, and which slots are taken;
- ``isolation`` and ``child``: ``--isolation process``, each slot's tasks in a child
  process the worker can stop (the worker's side, and the child's);
- ``outbox``: outcomes waiting to be written, flushed in batches, never twice;
- ``gate``: the Redis outage gate (one probe reconnects, every loop waits on it);
- ``runtime_file``: the throttled writer of ``worker.json`` for ``taskfleet drain``;
- ``claiming``: the claim loop: how many to ask for, when to wait, what it last saw;
- ``start``: registering a worker and reading the queue's lease TTL;
- ``writing``: outcomes written (completions, claiming replacements in the same call,
  and failures);
- ``heartbeat``: the heartbeat loop: leases extended, lost ones abandoned, sweeps;
- ``handback``: tasks given back without an attempt (a drain's unfinished runs, late
  prefetch);
- ``core``: ``Worker``, the claim, flush and heartbeat loops, start and drain;
- ``events``: one structured log line per event.

and the worker's side of the protocol and of its container:

- ``broker``: register, claim, heartbeat and finish tasks (asyncio, one script call each);
- ``claimed``: what a claim hands over (``ClaimedTask``, ``ClaimResult``), read from the
  claim script's records, and which tasks can't be run as stored: pure, no Redis;
- ``handlers``: loading a handler, ``current_task()``, results and errors as stored;
- ``runtime``: ``worker.json`` and the ``taskfleet drain`` side that reads it;
- ``identity``: a worker's whereabouts, and whether a worker holding a name (its
  ``WorkerRecord``) is alive;
- ``reaper``: PID 1, a tiny init that forwards signals and reaps orphans.
- ``children``: at exit, the processes handlers forked and left running are ended.

Imports go one way: this package uses the protocol (never the producer API); only the
CLI (and tests) import it. ``Worker`` and friends load on first use, so ``taskfleet
drain`` (the preStop hook) reads the runtime file without importing the worker's loops.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taskfleet.worker.core import Worker
    from taskfleet.worker.events import log_event
    from taskfleet.worker.settings import WorkerSettings

_LAZY = {
    "Worker": "taskfleet.worker.core",
    "WorkerSettings": "taskfleet.worker.settings",
    "log_event": "taskfleet.worker.events",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'taskfleet.worker' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = ["Worker", "WorkerSettings", "log_event"]
