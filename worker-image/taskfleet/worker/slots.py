"""How many tasks a worker may claim: slots, prefetch and the run-time average behind it.

Pure arithmetic, no I/O, so it is tested without Redis. Two words, one idea each:

- a **free** slot would start a task at once: ``concurrency - held - kept`` (negative
  when prefetched tasks wait for one), where ``held`` counts the tasks held (claim to
  written) and ``kept`` the slots held by calls given up on that still run;
- **room** is what a claim may ask for: the free slots plus the prefetch allowance while
  it applies (sync handlers whose runs are short: a moving average under 10 ms).
"""

from __future__ import annotations

#: Prefetch applies only while a typical run (moving average) is shorter than this: a
#: task never waits long behind others in one worker while another worker could run it.
PREFETCH_RUN_LIMIT_S = 0.01
#: A prefetched task that waited this long for a thread (they are all busy with long
#: runs) is given back to the queue, and prefetch stops until runs are short again.
PREFETCH_MAX_WAIT_S = 1.0
#: Weight of the newest run in that moving average.
RUN_TIME_WEIGHT = 0.1


class Slots:
    """``concurrency`` slots and up to ``prefetch`` tasks waiting for one."""

    __slots__ = ("concurrency", "prefetch", "typical_run_s")

    def __init__(self, concurrency: int, prefetch: int) -> None:
        self.concurrency = concurrency
        self.prefetch = prefetch  # 0: never (async handlers, or --prefetch 0)
        self.typical_run_s: float | None = None  # moving average of the runs' durations

    def free(self, held: int, kept: int) -> int:
        """Slots that would start a task at once (negative: prefetched tasks wait)."""
        return self.concurrency - held - kept

    def prefetch_room(self) -> int:
        """Tasks that may wait for a slot now: all of ``prefetch`` while runs are short."""
        typical = self.typical_run_s
        if self.prefetch and typical is not None and typical < PREFETCH_RUN_LIMIT_S:
            return self.prefetch
        return 0

    def room(self, held: int, kept: int) -> int:
        """Tasks to claim now: free slots, plus the prefetch room."""
        return self.free(held, kept) + self.prefetch_room()

    @staticmethod
    def prefetch_part(n: int, free: int) -> int:
        """Of ``n`` tasks claimed with ``free`` slots, how many would wait for a slot."""
        return max(0, n - max(0, free))

    def refill(self, completed: int, held: int, kept: int) -> tuple[int, int]:
        """A write completing ``completed`` of the ``held`` tasks also claims: how many
        (only the slots these completions free, and the prefetch room), and how many of
        those are prefetch. ``held`` still counts the completed ones."""
        free = self.free(held, kept) + completed
        n = max(0, min(completed, free + self.prefetch_room()))
        return n, self.prefetch_part(n, free)

    def record_run(self, seconds: float) -> None:
        typical = self.typical_run_s
        self.typical_run_s = (
            seconds if typical is None else typical + RUN_TIME_WEIGHT * (seconds - typical)
        )

    def prefetch_waited_too_long(self) -> None:
        """A prefetched task waited PREFETCH_MAX_WAIT_S: stop until runs are short again."""
        self.typical_run_s = max(self.typical_run_s or 0.0, PREFETCH_MAX_WAIT_S)
