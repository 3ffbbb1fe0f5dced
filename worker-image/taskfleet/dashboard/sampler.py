"""The queues' counters sampled in the background, and the queues found in the background.

The rate charts draw the queue's own per-minute counts (``rate:<minute>`` hashes the
scripts write, an hour back), read here every ``HISTORY_S`` seconds: one HMGET a minute,
one pipelined round trip for all queues. A queue whose workers write none (older ones)
is drawn from the samples kept here instead, since the dashboard started. Each step reads
every queue's ``completed`` and ``failed`` counters with the server's time (one
pipelined round trip for all queues): the rates "now" and the dead count's rise. Without
named queues, the queues and the provider quotas of the Redis are found by SCANs over its keys, here
and never in a page view: at ``discover_s`` intervals, in steps of 1000 keys.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

import redis
from redis.cluster import RedisCluster

from taskfleet.producer.overview import discover
from taskfleet.protocol import store
from taskfleet.protocol.calls import run, run_all, scan
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.holdbacks import DEAD_COUNTER
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.reads import RATE_MINUTES, QueueReads

log = logging.getLogger("taskfleet.dashboard")

#: The counters a chart draws, by the name its legend shows.
CHARTED = {"done": "completed", "failed": "failed"}
#: Every counter sampled: the charted ones and the dead count the alarms watch.
SAMPLED = (*CHARTED.values(), DEAD_COUNTER)


#: Seconds between two reads of the queues' per-minute history.
HISTORY_S = 15.0


@dataclass(frozen=True)
class History:
    """A queue's per-minute counts as read at ``at_ms``: (minute, completed, failed), the
    oldest first, the last one the minute under way."""

    at_ms: int
    minutes: list[tuple[int, int, int]]

    @property
    def empty(self) -> bool:
        return not any(c or f for _, c, f in self.minutes)


@dataclass(frozen=True)
class Sample:
    at_ms: int
    counters: dict[str, int]


def rates(samples: list[Sample]) -> dict[str, list[tuple[int, float]]]:
    """Per charted counter: (end of interval ms, per second) between consecutive samples.
    A counter that went down (the queue was purged) reads as 0 for that interval."""
    out: dict[str, list[tuple[int, float]]] = {name: [] for name in CHARTED}
    for before, after in itertools.pairwise(samples):
        seconds = (after.at_ms - before.at_ms) / 1000
        if seconds <= 0:
            continue
        for name, counter in CHARTED.items():
            delta = after.counters.get(counter, 0) - before.counters.get(counter, 0)
            out[name].append((after.at_ms, max(0, delta) / seconds))
    return out


class Sampler:
    """Keeps the last ``history_s`` of samples per queue; one daemon thread."""

    def __init__(
        self,
        client: SyncClient,
        queues: tuple[str, ...],
        *,
        sample_s: float,
        history_s: float,
        discover_s: float,
        keep_s: float = 0.0,
        quotas: tuple[str, ...] = (),
    ) -> None:
        self._client = client
        self._fixed = queues
        self._named_quotas = quotas
        self._quotas: list[str] = sorted(quotas)
        self._sample_s = sample_s
        self._discover_s = discover_s
        # the charts draw history_s; the alarms look back keep_s (the longer is kept)
        self._keep = max(2, int(max(history_s, keep_s) / sample_s) + 1)
        self._lock = threading.Lock()
        self._samples: dict[str, deque[Sample]] = {}
        self._history: dict[str, History] = {}
        self._history_read = -HISTORY_S
        self._names: list[str] = sorted(queues)
        self._discovered = bool(queues)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def queues(self) -> list[str]:
        with self._lock:
            return list(self._names)

    def quotas(self) -> list[str]:
        """The provider quotas: those named, and those found (without named queues)."""
        with self._lock:
            return list(self._quotas)

    def discovered(self) -> bool:
        """Whether the queues are known (named, or one discovery has finished)."""
        with self._lock:
            return self._discovered

    def samples(self, queue: str) -> list[Sample]:
        with self._lock:
            return list(self._samples.get(queue, ()))

    def history(self, queue: str) -> History | None:
        """The queue's per-minute counts as last read (None: not read yet)."""
        with self._lock:
            return self._history.get(queue)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dashboard-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def discover_now(self) -> None:
        names = discover(self._client)
        found = set(scan(self._client, store.provider_quotas()))
        with self._lock:
            self._names = names
            self._quotas = sorted(found | set(self._named_quotas))
            self._discovered = True

    def sample_now(self) -> None:
        names = self.queues()
        every = [QueueReads(QueueKeys(name)) for name in names]
        found = run_all(self._client, [r.counters_of(list(SAMPLED)) for r in every])
        # each queue on its own node's clock (a cluster pipeline refuses TIME); a single
        # server has one clock for all
        if isinstance(self._client, RedisCluster):
            clocks = [run(self._client, r.clock()) for r in every]
        else:
            clocks = [run(self._client, every[0].clock()) if every else 0] * len(every)
        with self._lock:
            for name, at_ms, counters in zip(names, clocks, found, strict=True):
                kept = self._samples.setdefault(name, deque(maxlen=self._keep))
                kept.append(Sample(at_ms, counters))
            for gone in set(self._samples) - set(names):
                del self._samples[gone]
            for gone in set(self._history) - set(names):
                del self._history[gone]
        if time.monotonic() - self._history_read >= HISTORY_S:
            self._history_read = time.monotonic()
            self.read_history(names, every, clocks)

    def read_history(self, names: list[str], every: list[QueueReads], clocks: list[int]) -> None:
        calls = [
            r.rate_history(at // 60000, RATE_MINUTES) for r, at in zip(every, clocks, strict=True)
        ]
        found = run_all(self._client, calls)
        with self._lock:
            for name, at_ms, minutes in zip(names, clocks, found, strict=True):
                self._history[name] = History(at_ms, minutes)

    def _run(self) -> None:
        next_discovery = 0.0
        elapsed = 0.0
        while not self._stop.is_set():
            with contextlib.suppress(redis.RedisError):
                if not self._fixed and elapsed >= next_discovery:
                    self.discover_now()
                    next_discovery = elapsed + self._discover_s
                self.sample_now()
            # an unreachable Redis: the pages say so; the chart shows a gap
            self._stop.wait(self._sample_s)
            elapsed += self._sample_s
