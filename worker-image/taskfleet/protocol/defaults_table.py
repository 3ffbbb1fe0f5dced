"""The one table of the queue config's defaults and of the bounds every client keeps.

Everything else is generated from it by ``python -m taskfleet.protocol.bundle --write``
(``make bundle``; ``bundle/defaults_gen.py``): ``bounds.py`` and ``defaults.py`` for
Python, the ``DEFAULTS`` table of the Lua scripts (through ``defaults.lua_defaults``),
and ``clients/node/src/protocol/defaults.ts`` for TypeScript. ``make bundle-check``
fails when a generated file differs, or when a default is written as a literal beside a
config field's name anywhere else. Only the generator imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class Bound:
    """A named bound: ``expr`` is valid Python and TypeScript, over earlier bounds only."""

    name: str
    expr: str
    unit: str
    doc: str


@dataclass(frozen=True, slots=True)
class ConfigField:
    """A field of the ``config`` hash, in ``QueueConfig`` order.

    ``default``: what an unset field means (None: unset, no limit). ``off``: the number the
    scripts read for an unset optional field (0: no limit), or None when they read nil.
    ``spec``: the TaskQueue field the operator writes it from (none: left to its default).
    ``low`` is excluded when ``above`` (pydantic's ``gt``), else included (``ge``); ``high``
    is a number or a bound's name, included.
    """

    name: str
    kind: Literal["int", "float"]
    default: int | float | None
    low: int | float | str
    above: bool
    high: int | float | str
    unit: str
    doc: str
    off: int | float | None = None
    spec: str = ""


#: What bounds.py says of all of them (its module docstring).
BOUNDS_DOC = """\
Bounds on every time and number a task or a queue's config can carry, in one place.

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
"""

BOUNDS: tuple[Bound, ...] = (
    Bound(
        "MAX_DURATION_S",
        "100 * 365 * 24 * 3600",
        "s",
        "A delay, a deadline (seconds from now) and every duration of a queue's config: 100 years.",
    ),
    Bound("MAX_DELAY_S", "MAX_DURATION_S", "s", "Longest delay."),
    Bound("MAX_DEADLINE_S", "MAX_DURATION_S", "s", "Furthest deadline, from now."),
    Bound(
        "MAX_TIMEOUT_S",
        "365 * 24 * 3600",
        "s",
        "A task's timeout (and the queue's default_timeout_s): one year. None: no timeout.",
    ),
    Bound(
        "MAX_COUNT",
        "10**9",
        "",
        "Integers the scripts compute with or pass to workers (cost, limits, counts).",
    ),
    Bound("MIN_COST", "0", "", "A task's cost in rate-limit units (0: takes nothing)."),
    Bound("MAX_COST", "MAX_COUNT", "", "Highest cost of one task."),
    Bound("MIN_ATTEMPTS", "1", "", "Fewest starts a task may have."),
    Bound("MAX_ATTEMPTS", "10_000", "", "Most starts a task may have (per task or the queue's)."),
    Bound("MAX_LOST", "MAX_ATTEMPTS", "", "Most lost workers a task may survive."),
    Bound("PRIORITY_MIN", "-1000", "", "Lowest priority: pending scores stay exact doubles."),
    Bound("PRIORITY_MAX", "1000", "", "Highest priority."),
    Bound(
        "MAX_TASK_ID_LEN",
        "200",
        "characters",
        "A task id: 1 to 200 printable characters (ids travel NUL-separated in claim replies).",
    ),
    Bound("MAX_AFTER", "10_000", "tasks", "Most tasks one task may wait for (``after``)."),
    Bound(
        "MAX_PAYLOAD_BYTES",
        "512 * 1024 * 1024",
        "bytes",
        "Payloads and results: Redis refuses strings over 512 MiB.",
    ),
    Bound(
        "MAX_PAYLOAD_DEPTH",
        "200",
        "levels",
        "Deepest nesting of arrays and objects in a payload: every reader (a worker's handler "
        "thread, Lua's cjson, a CLI printing it) can parse and print it with room to spare.",
    ),
    Bound(
        "MAX_EPOCH_MS",
        "253_402_300_799_999",
        "ms",
        "Latest epoch ms a ``datetime`` can hold (9999-12-31T23:59:59.999Z); readers map a "
        "stored time beyond it (or before year 1) to None.",
    ),
    Bound("MIN_EPOCH_MS", "-62_135_596_800_000", "ms", "Earliest epoch ms a reader maps (year 1)."),
    Bound(
        "MIN_LEASE_TTL_S",
        "1.0",
        "s",
        "Shortest lease TTL a queue may have: below it a fleet spends its time heartbeating "
        "(a lease TTL of 0.01 s made a 3 ms heartbeat).",
    ),
    Bound("MIN_HEARTBEAT_S", "0.1", "s", "Shortest heartbeat a worker beats at."),
    Bound(
        "MAX_CONCURRENCY",
        "10_000",
        "slots",
        "Slots of one worker process (``--concurrency``): a sync handler's threads, an async "
        "one's tasks. Above this a claim, a heartbeat or a drain's hand-back grows past what "
        "one script call should do; run more processes (``--processes``) or pods instead.",
    ),
    Bound(
        "MAX_BATCH",
        "100",
        "tasks",
        "Most tasks one script call claims, completes or gives back: the client loops over "
        "larger asks in batches of this, so no call blocks Redis for more than a few ms (a "
        "release of 18,893 tasks in one call took 885 ms).",
    ),
    Bound(
        "MAX_DEFERRALS",
        "20",
        "retries",
        "Retries a handler may ask for (``RetryAfter``) per task without spending an attempt; "
        "past this, each one counts as a failed attempt (so ``max_attempts`` still ends it).",
    ),
    Bound(
        "MAX_CHECKPOINT_BYTES",
        "1024 * 1024",
        "bytes",
        "Largest checkpoint state of a task (its JSON text): the next attempt's claim carries it.",
    ),
    Bound(
        "MAX_OUTPUT_ENTRIES",
        "10_000",
        "entries",
        "Most chunks one task's output stream holds (emit), every attempt's together.",
    ),
    Bound(
        "MAX_OUTPUT_BYTES",
        "16 * 1024 * 1024",
        "bytes",
        "Most bytes of chunks one task's output stream holds, every attempt's together.",
    ),
)

#: What the bounds promise, checked when the table is generated: the largest stored time
#: is exact in Lua's %.14g and a datetime can hold it (until year ~5000 of the server's clock).
PROMISES = ("MAX_DURATION_S * 1000 < 1e13", "MAX_COUNT < 1e14", "MAX_ATTEMPTS <= MAX_COUNT")

D = "MAX_DURATION_S"
N = "MAX_COUNT"

#: Every field of the ``config`` hash (``QueueConfig``), in order.
FIELDS: tuple[ConfigField, ...] = (
    ConfigField(
        "max_concurrency", "int", 0, 0, False, N, "tasks",
        "tasks running at once, fleet-wide; 0 = no limit",
        spec="maxConcurrency",
    ),
    ConfigField(
        "rate_limit_tasks", "int", None, 0, True, N, "tasks",
        "tasks started per period",
        off=0, spec="rateLimit.tasks",
    ),
    ConfigField(
        "rate_limit_cost", "int", None, 0, True, N, "cost",
        "cost units started per period",
        off=0, spec="rateLimit.cost",
    ),
    ConfigField(
        "rate_limit_period_s", "float", 1.0, 0, True, D, "s",
        "the period of both rate limits",
        spec="rateLimit.periodSeconds",
    ),
    ConfigField(
        "max_attempts", "int", 3, 1, False, "MAX_ATTEMPTS", "starts",
        "starts before a failing task goes dead (of a task enqueued without its own)",
        spec="maxAttempts",
    ),
    ConfigField(
        "backoff_base_s", "float", 1.0, 0, False, D, "s",
        "first retry delay",
        spec="backoff.baseSeconds",
    ),
    ConfigField(
        "backoff_max_s", "float", 300.0, 0, False, D, "s",
        "longest retry delay",
        spec="backoff.maxSeconds",
    ),
    ConfigField(
        "backoff_jitter", "float", 0.2, 0, False, 1, "fraction",
        "+- fraction of each backoff",
    ),
    ConfigField(
        "max_lost", "int", 3, 1, False, "MAX_LOST", "losses",
        "lost workers a task survives; one more and it goes dead",
        spec="maxLost",
    ),
    ConfigField(
        "lease_ttl_s", "float", 30.0, "MIN_LEASE_TTL_S", False, D, "s",
        "a lease not extended for this long expires",
        spec="heartbeat.ttlSeconds",
    ),
    ConfigField(
        "done_retention_s", "float", 3600.0, 0, False, D, "s",
        "how long done tasks are kept (0: deleted at completion)",
        spec="retention.doneSeconds",
    ),
    ConfigField(
        "dead_retention_s", "float", 259200.0, 0, False, D, "s",
        "how long dead and cancelled tasks are kept",
        spec="retention.deadSeconds",
    ),
    ConfigField(
        "max_payload_bytes", "int", 1024 * 1024, 0, True, "MAX_PAYLOAD_BYTES", "bytes",
        "bound on payloads and results",
    ),
    ConfigField(
        "default_timeout_s", "float", None, 0, True, "MAX_TIMEOUT_S", "s",
        "a task's timeout when it sets none; unset: none",
        spec="maxTaskDurationSeconds",
    ),
    ConfigField(
        "throttle_base_s", "float", 1.0, 0, True, D, "s",
        "the fleet's first claim pause after a rate limit without a retry-after",
        spec="throttle.baseSeconds",
    ),
    ConfigField(
        "throttle_max_s", "float", 300.0, 0, True, D, "s",
        "cap of that pause, which doubles with each rate limit in a row",
        spec="throttle.maxSeconds",
    ),
    ConfigField(
        "budget_day", "int", None, 0, True, N, "cost",
        "cost units claimed per UTC day; claims wait for the next day past it",
        off=0, spec="budget.day",
    ),
    ConfigField(
        "budget_month", "int", None, 0, True, N, "cost",
        "cost units claimed per UTC calendar month",
        off=0, spec="budget.month",
    ),
    ConfigField(
        "group_max_concurrency", "int", 0, 0, False, N, "tasks",
        "tasks of one group running at once (every group's default); 0 = no limit",
        spec="groups.maxConcurrency",
    ),
    ConfigField(
        "group_rate_limit_tasks", "int", None, 0, True, N, "tasks",
        "tasks of one group started per rate_limit_period_s (every group's default)",
        off=0, spec="groups.rateLimitTasks",
    ),
    ConfigField(
        "group_rate_limit_cost", "int", None, 0, True, N, "cost",
        "cost of one group started per rate_limit_period_s (every group's default)",
        off=0, spec="groups.rateLimitCost",
    ),
    ConfigField(
        "group_budget_day", "int", None, 0, True, N, "cost",
        "cost units one group claims per UTC day (every group's default)",
        off=0, spec="groups.budget.day",
    ),
    ConfigField(
        "group_budget_month", "int", None, 0, True, N, "cost",
        "cost units one group claims per UTC calendar month (every group's default)",
        off=0, spec="groups.budget.month",
    ),
)  # fmt: skip
