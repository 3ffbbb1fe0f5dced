"""What the worker times per task (run time, queue wait) and per claim (round trip).

A ``Histogram`` is a list of bucket counts the loop thread alone writes, ~0.1 µs an
observation, where prometheus-client's locked histogram costs several times that. Its
readers (``metrics``, at scrape time) take a copy; an observation landing meanwhile
shows at the next scrape. No I/O and no dependency: the execution records into these
whether or not anything serves them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

__all__ = ["CLAIM_BUCKETS", "TIME_BUCKETS", "Histogram", "Timings"]

#: Run and wait times, seconds: millisecond tasks to hour-long ones.
TIME_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)
#: Claim round trips, seconds: a local Redis answers in well under a millisecond.
CLAIM_BUCKETS = (
    0.0002,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)


class Histogram:
    """Bucket counts for one series, written by the loop thread only (no lock)."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)
        self.total = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound counts in that bucket (Prometheus' "le")
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> tuple[list[tuple[str, float]], float]:
        """``(le, cumulative count)`` pairs ending with ``+Inf``, and the sum."""
        counts, total = list(self.counts), self.total
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return out, total


class Timings:
    """The per-task and per-claim timings (``Execution`` and the claim loop write them)."""

    __slots__ = ("claim", "enabled", "run", "wait")

    def __init__(self) -> None:
        # Off until `serve` starts an endpoint: a worker without metrics times nothing.
        self.enabled = False
        self.run = Histogram(TIME_BUCKETS)
        self.wait = Histogram(TIME_BUCKETS)
        self.claim = Histogram(CLAIM_BUCKETS)
