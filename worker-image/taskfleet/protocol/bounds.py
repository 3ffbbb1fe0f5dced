"""Bounds on every time and number a task or a queue's config can carry, in one place.

A value enters at the door (``Queue.enqueue``, ``taskfleet enqueue``, ``QueueConfig``)
and is read back by every part of the system: Lua scripts (Lua 5.1 numbers are doubles,
and ``tostring`` formats them with ``%.14g``), the worker (``int()`` / ``float()`` of what
a claim returns), and ``Task`` (Python ``datetime``, years 1 to 9999). The door refuses
anything outside these bounds, so whatever is stored can be read by all of them:

- times: server epoch ms plus a delay, deadline or retention stays below 1e14 ms, so Lua
  prints it as an exact integer (``%.14g``), and below year 9999 for ``datetime``
  (``MAX_DURATION_S`` is 100 years; epoch ms are about 1.8e12 today, 1e14 is year 5138);
- integers the scripts do arithmetic on or hand to the worker (cost, counts, limits) stay
  at or below ``MAX_COUNT`` = 1e9: exact in a double and printed as digits by ``%.14g``
  (which would print 1e14 as ``1e+14``, a text ``int()`` cannot read);
- priorities stay within +-1000, so pending scores (priority * 1e12 + sequence) stay exact.

This module imports nothing of taskfleet: the queue, the CLI, the config model and the
worker all read their bounds from here.

This file is generated from taskfleet/protocol/defaults_table.py by `make bundle`.
"""

from __future__ import annotations

#: A delay, a deadline (seconds from now) and every duration of a queue's config: 100 years.
MAX_DURATION_S = 100 * 365 * 24 * 3600
#: Longest delay.
MAX_DELAY_S = MAX_DURATION_S
#: Furthest deadline, from now.
MAX_DEADLINE_S = MAX_DURATION_S
#: A task's timeout (and the queue's default_timeout_s): one year. None: no timeout.
MAX_TIMEOUT_S = 365 * 24 * 3600
#: Integers the scripts compute with or pass to workers (cost, limits, counts).
MAX_COUNT = 10**9
#: A task's cost in rate-limit units (0: takes nothing).
MIN_COST = 0
#: Highest cost of one task.
MAX_COST = MAX_COUNT
#: Fewest starts a task may have.
MIN_ATTEMPTS = 1
#: Most starts a task may have (per task or the queue's).
MAX_ATTEMPTS = 10_000
#: Most lost workers a task may survive.
MAX_LOST = MAX_ATTEMPTS
#: Lowest priority: pending scores stay exact doubles.
PRIORITY_MIN = -1000
#: Highest priority.
PRIORITY_MAX = 1000
#: A task id: 1 to 200 printable characters (ids travel NUL-separated in claim replies).
MAX_TASK_ID_LEN = 200
#: Most tasks one task may wait for (``after``).
MAX_AFTER = 10_000
#: Payloads and results: Redis refuses strings over 512 MiB.
MAX_PAYLOAD_BYTES = 512 * 1024 * 1024
#: Deepest nesting of arrays and objects in a payload: every reader (a worker's handler thread,
#: Lua's cjson, a CLI printing it) can parse and print it with room to spare.
MAX_PAYLOAD_DEPTH = 200
#: Latest epoch ms a ``datetime`` can hold (9999-12-31T23:59:59.999Z); readers map a stored time
#: beyond it (or before year 1) to None.
MAX_EPOCH_MS = 253_402_300_799_999
#: Earliest epoch ms a reader maps (year 1).
MIN_EPOCH_MS = -62_135_596_800_000
#: Shortest lease TTL a queue may have: below it a fleet spends its time heartbeating (a lease TTL
#: of 0.01 s made a 3 ms heartbeat).
MIN_LEASE_TTL_S = 1.0
#: Shortest heartbeat a worker beats at.
MIN_HEARTBEAT_S = 0.1
#: Slots of one worker process (``--concurrency``): a sync handler's threads, an async one's tasks.
#: Above this a claim, a heartbeat or a drain's hand-back grows past what one script call should do;
#: run more processes (``--processes``) or pods instead.
MAX_CONCURRENCY = 10_000
#: Most tasks one script call claims, completes or gives back: the client loops over larger asks in
#: batches of this, so no call blocks Redis for more than a few ms (a release of 18,893 tasks in one
#: call took 885 ms).
MAX_BATCH = 100
#: Retries a handler may ask for (``RetryAfter``) per task without spending an attempt; past this,
#: each one counts as a failed attempt (so ``max_attempts`` still ends it).
MAX_DEFERRALS = 20
#: Largest checkpoint state of a task (its JSON text): the next attempt's claim carries it.
MAX_CHECKPOINT_BYTES = 1024 * 1024
#: Most chunks one task's output stream holds (emit), every attempt's together.
MAX_OUTPUT_ENTRIES = 10_000
#: Most bytes of chunks one task's output stream holds, every attempt's together.
MAX_OUTPUT_BYTES = 16 * 1024 * 1024
