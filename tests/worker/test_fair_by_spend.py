"""Groups fair by spend (docs/quotas.md, "Groups fair by spend"): with real worker processes,
a group whose tasks really use ten times the tokens is claimed about ten times less often,
though every task estimated the same; fair by claims, the groups take turns."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from taskfleet import Queue, Quota
from taskfleet.protocol.errors import InvalidArgument

from tests.polling import wait_for
from tests.workers.harness import FAST, Fleet
from tests.workers.quota_handlers import STARTS

HANDLER = "tests.workers.quota_handlers:call"
#: one slot, nothing prefetched: each claim sees the settlements of the runs before it
ONE_AT_A_TIME = [*FAST, "--concurrency", "1", "--prefetch", "0"]
#: every task estimates the same; the big group's settle 10x that
EST = {"openai": {"output_tokens": 100}}


@pytest.fixture
def llm(redis_url: str) -> Iterator[Quota]:
    quota = Quota("openai", redis_url=redis_url)
    quota.configure(limits={"output_tokens": 10**9}, period_s=3600)
    yield quota
    quota.close()


def _first_starts(q: Queue, client: redis.Redis, fleet: Fleet, n: int) -> tuple[int, int]:
    """(small, big): how many of the first ``n`` starts were of each group."""
    small = {
        q.enqueue({"settle": {"output_tokens": 100}}, group="small", quotas=EST) for _ in range(40)
    }
    big = {
        q.enqueue({"settle": {"output_tokens": 1000}}, group="big", quotas=EST) for _ in range(40)
    }
    fleet.add(HANDLER, args=ONE_AT_A_TIME).start()
    wait_for(lambda: client.llen(STARTS) >= n, timeout=30, what=f"{n} starts")
    starts = [s.decode() if isinstance(s, bytes) else s for s in client.lrange(STARTS, 0, n - 1)]
    first = [s.split(":", 1)[1] for s in starts]
    return sum(t in small for t in first), sum(t in big for t in first)


def test_groups_fair_by_settled_tokens_claim_the_big_spender_about_ten_times_less(
    redis_url: str, redis_client: redis.Redis, llm: Quota, fleet: Fleet
) -> None:
    q = Queue("jobs", redis_url=redis_url)
    q.set_fair_by("output_tokens")
    assert q.fair_by() == "output_tokens"
    small, big = _first_starts(q, redis_client, fleet, 33)
    # by spend: about 30 to 3; by claims it would be 16 to 17
    assert small >= 4 * big, (small, big)


def test_groups_fair_by_claims_take_turns_whatever_their_tasks_spend(
    redis_url: str, redis_client: redis.Redis, llm: Quota, fleet: Fleet
) -> None:
    q = Queue("jobs", redis_url=redis_url)
    q.set_fair_by("output_tokens")
    q.set_fair_by("claims")
    assert q.fair_by() is None
    small, big = _first_starts(q, redis_client, fleet, 20)
    assert abs(small - big) <= 2, (small, big)


def test_fair_by_a_name_that_is_no_unit_is_refused_and_nothing_is_stored(
    redis_url: str, redis_client: redis.Redis
) -> None:
    q = Queue("jobs", redis_url=redis_url)
    with pytest.raises(InvalidArgument, match="fair_by"):
        q.set_fair_by("Output Tokens")
    assert q.fair_by() is None
    assert redis_client.keys("*groups:fair*") == []
