"""``WorkerSettings``: everything ``taskfleet worker`` takes, validated in one place."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from taskfleet.protocol import bounds
from taskfleet.protocol.keys import validate_queue_name
from taskfleet.protocol.redisurl import parse_redis_url

#: Upper bound of --prefetch.
MAX_PREFETCH = 10_000

#: How long a slot may stay held by a call the worker gave up on (its task timed out, its
#: lease was lost) before it counts as stuck: long enough for a handler that returns late
#: (a slow request's own timeout), short enough that a worker that can take no work is
#: restarted within minutes.
DEFAULT_HELD_GRACE_S = 60.0

#: How a worker runs sync handlers: on its threads, or each slot in a child process.
ISOLATION_MODES = ("thread", "process")


@dataclass(frozen=True)
class WorkerSettings:
    """Everything ``taskfleet worker`` takes; validated by the CLI before it gets here."""

    queue: str
    redis_url: str = field(repr=False)  # may hold a password: never in a repr or a log
    pod: str
    incarnation: str
    concurrency: int = 1
    prefetch: int | None = None  # None: twice the concurrency (see prefetch_depth)
    drain_timeout: float = 30.0
    heartbeat_interval: float = 5.0
    # deprecated, ignored but for a warning at start: the queue's config sets the lease TTL
    lease_ttl: float | None = None
    default_timeout: float | None = None
    sweep_every: int = 3  # heartbeats between queue sweeps
    idle_wait: float = 1.0  # longest BLPOP; also bounds how long a missed wake-up costs
    backoff_base: float = 0.1
    backoff_max: float = 5.0
    runtime_dir: str | None = None
    fire_schedules: bool = True  # fire the queue's due schedules in the background
    #: Start on a Redis whose maxmemory-policy may delete keys (loudly warned).
    allow_eviction: bool = False
    isolation: str = "thread"  # "process": each slot's tasks in a child process (isolation.py)
    max_tasks_per_child: int | None = None  # process isolation: tasks before a child is replaced
    #: seconds between the info ``tasks_summary`` lines (``summary.py``)
    summary_interval: float = 10.0
    #: seconds a slot may stay held by a call given up on before it is stuck; a worker
    #: whose every slot is stuck drains and exits to be restarted (``held.py``)
    held_grace: float = DEFAULT_HELD_GRACE_S

    @property
    def isolated(self) -> bool:
        return self.isolation == "process"

    @property
    def prefetch_depth(self) -> int:
        """Most claimed tasks held waiting for a slot (sync handlers, short tasks only)."""
        if self.prefetch is None:
            return min(2 * self.concurrency, MAX_PREFETCH)
        return self.prefetch

    @property
    def reply_timeout(self) -> float:
        """How long any one Redis call may go without a reply before it counts as an
        outage: long enough for a slow script, short enough to notice a dead server."""
        return max(2.0, self.idle_wait + 2.0)

    def validate(self) -> None:
        """Raise ValueError with one line saying what to fix."""
        if not 1 <= self.concurrency <= bounds.MAX_CONCURRENCY:
            raise ValueError(
                f"concurrency must be within 1..{bounds.MAX_CONCURRENCY}, got {self.concurrency}"
                " (for more, run more --processes or pods)"
            )
        if self.isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation must be thread or process, got {self.isolation!r}")
        if self.max_tasks_per_child is not None:
            if not self.isolated:
                raise ValueError(
                    "max tasks per child needs process isolation (--isolation process)"
                )
            if self.max_tasks_per_child < 1:
                raise ValueError(
                    f"max tasks per child must be at least 1, got {self.max_tasks_per_child}"
                )
        if self.prefetch is not None and not 0 <= self.prefetch <= MAX_PREFETCH:
            raise ValueError(f"prefetch must be within 0..{MAX_PREFETCH}, got {self.prefetch}")
        # nan passes every comparison below and inf means "never": both would be written
        # into the queue's shared config or spin the heartbeat, so refuse them first.
        for what, value in (
            ("heartbeat interval", self.heartbeat_interval),
            ("lease TTL", self.lease_ttl),
            ("drain timeout", self.drain_timeout),
            ("task timeout", self.default_timeout),
            ("held grace", self.held_grace),
        ):
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{what} must be a finite number of seconds, got {value}")
        for what, value, bound in (
            ("heartbeat interval", self.heartbeat_interval, bounds.MAX_DURATION_S),
            ("lease TTL", self.lease_ttl, bounds.MAX_DURATION_S),
            ("drain timeout", self.drain_timeout, bounds.MAX_TIMEOUT_S),
            ("task timeout", self.default_timeout, bounds.MAX_TIMEOUT_S),
            ("held grace", self.held_grace, bounds.MAX_TIMEOUT_S),
        ):
            if value is not None and value > bound:
                raise ValueError(f"{what} must be at most {bound:g} seconds, got {value:g}")
        if self.heartbeat_interval < bounds.MIN_HEARTBEAT_S:
            raise ValueError(
                f"heartbeat interval must be at least {bounds.MIN_HEARTBEAT_S:g} seconds, "
                f"got {self.heartbeat_interval:g}"
            )
        if self.drain_timeout < 0:
            raise ValueError("drain timeout must not be negative")
        if self.held_grace <= 0:
            raise ValueError(f"held grace must be positive, got {self.held_grace:g}")
        if self.default_timeout is not None and self.default_timeout <= 0:
            raise ValueError("task timeout must be positive")
        validate_queue_name(self.queue)
        parse_redis_url(self.redis_url)  # InvalidRedisURL (a ValueError), never the URL
        if not self.pod:
            raise ValueError("pod name must not be empty")
