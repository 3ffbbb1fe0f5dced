"""A 4-worker fleet (real processes) behind a simulated provider that answers 429 past
its limit per window (bench/provider.py): with the queue's claim pause (RateLimited) the
provider sees at most its limit plus one request per worker per window; with per-task
retries (RetryAfter) far more. Asserted loosely: the figures are in
bench/journal/2026-11-27-provider.md."""

from __future__ import annotations

import pytest

from bench.provider import run_fleet

WORKERS, LIMIT, WINDOW_S = 4, 10, 2.0


@pytest.mark.slow
def test_a_rate_limit_pauses_the_whole_fleet_not_one_task(redis_url: str) -> None:
    paused = run_fleet(
        redis_url, "pause", workers=WORKERS, limit=LIMIT, window_s=WINDOW_S, windows=3, tasks=400
    )
    assert paused.windows and all(a == LIMIT for a, _ in paused.windows), paused
    # Per worker and window: the request in flight when the limit is met. A handler
    # thread that met the limit begins no prefetched task until the pause is written and
    # those tasks are given back (HandlerThreads.resume).
    assert paused.worst <= LIMIT + WORKERS, paused
    retried = run_fleet(
        redis_url, "retry", workers=WORKERS, limit=LIMIT, window_s=WINDOW_S, windows=3, tasks=400
    )
    assert retried.worst > 2 * (LIMIT + WORKERS), retried
