"""The worker: ``taskfleet worker`` claims a queue's tasks, runs them, heartbeats, drains.

One idea per module:

- ``settings``: ``WorkerSettings``, what ``taskfleet worker`` takes, validated;
- ``slots``: how many tasks to claim (free slots, prefetch room): pure arithmetic;
- ``runs``: a held task (``Run``), its ``Outcome``, the worker's counters;
- ``execution``: how runs run (async handlers on the loop, sync ones on ``threads``),
  timeouts, lost leases, and which slots are taken;
- ``outbox``: outcomes waiting to be written, flushed in batches, never twice;
- ``gate``: the Redis outage gate (one probe reconnects, every loop waits on it);
- ``runtime_file``: the throttled writer of ``worker.json`` for ``taskfleet drain``;
- ``core``: ``Worker``, the claim, flush and heartbeat loops, start and drain;
- ``events``: one structured log line per event.

Imports go one way: this package uses the protocol modules (keys, config, scripts), the
broker, the runtime file format and handler loading; only the CLI (and tests) import it.
"""

from taskfleet.worker.core import Worker
from taskfleet.worker.events import log_event
from taskfleet.worker.settings import WorkerSettings

__all__ = ["Worker", "WorkerSettings", "log_event"]
