"""Fair claiming between groups under a skewed load, against FIFO in the same run.

    make bench-fairness

One group of 50,000 tasks enqueued first, then 99 groups of 50; 8 slots. Time is counted
in rounds: each round completes what the 8 slots ran and claims 8 more through the real
claim script (``complete`` with its claim), so every figure is about the order the
scripts give, not about this machine's speed. The same tasks without groups are the FIFO
baseline (the queue as it was before groups).

- completion round of each small group, against the bound ``ceil(n * G / S) + 1``
  (n its tasks, G = 100 backlogged groups, S = 8 slots): round robin gives each
  backlogged group one claim in G;
- Jain's fairness index of the tasks each group completed while all 100 were backlogged
  (the first small group's completion);
- 10,000 active groups (2 tasks each): the slowest claim call (SLOWLOG, µs) while they
  drain, and ``used_memory`` per active group against ungrouped tasks and once idle.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics

import redis
import redis.asyncio
from taskfleet import Queue
from taskfleet.worker.broker import Broker

from bench.run import redis_server

SLOTS = 8
BIG, SMALL_GROUPS, SMALL = 50_000, 99, 50
BATCH = 1000


def enqueue(q: Queue, grouped: bool) -> dict[str, str]:
    """The skewed load; returns task id -> its group (with or without groups stored)."""
    items = [{"payload": {}, "group": "big"} for _ in range(BIG)]
    for g in range(SMALL_GROUPS):
        items += [{"payload": {"g": g}, "group": f"small-{g:02d}"} for _ in range(SMALL)]
    group_of: dict[str, str] = {}
    for start in range(0, len(items), BATCH):
        chunk = items[start : start + BATCH]
        sent = chunk if grouped else [{"payload": i["payload"]} for i in chunk]
        ids = q.enqueue_many(sent)
        group_of.update(zip(ids, (str(i["group"]) for i in chunk), strict=True))
    return group_of


async def drain(url: str, name: str, group_of: dict[str, str]) -> dict[str, list[int]]:
    """Rounds in which each group's tasks completed."""
    client = redis.asyncio.Redis.from_url(url)
    broker = Broker(name, client, "bench", "1")
    done: dict[str, list[int]] = {}
    running: list[tuple[str, str]] = []
    rnd = 0
    try:
        while True:
            rnd += 1
            items = [(i, t, None) for i, t in running]
            for task_id, _ in running:
                done.setdefault(group_of[task_id], []).append(rnd)
            if items:
                _, claimed = await broker.complete_and_claim(items, SLOTS)
            else:
                claimed = await broker.claim(SLOTS)
            running = [(t.id, t.token) for t in claimed.tasks]
            if not running:
                return done
    finally:
        await broker.close()
        await client.aclose()


def jain(values: list[int]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def skewed(url: str, client: redis.Redis) -> None:
    rows = {}
    for name, grouped in (("fifo", False), ("fair", True)):
        client.flushall()
        with Queue(name, url) as q:
            group_of = enqueue(q, grouped)
        rows[name] = asyncio.run(drain(url, name, group_of))
    bound = math.ceil(SMALL * (SMALL_GROUPS + 1) / SLOTS) + 1
    print(f"\nskewed load: {BIG:,} tasks in one group, {SMALL_GROUPS} groups of {SMALL}, "
          f"{SLOTS} slots; rounds (one round = each slot runs one task)")  # fmt: skip
    print(f"  bound for a group of {SMALL}: ceil(n * G / S) + 1 = {bound} rounds")
    for name, done in rows.items():
        small = [max(done[f"small-{g:02d}"]) for g in range(SMALL_GROUPS)]
        window = min(small)
        counts = [sum(1 for r in rounds if r <= window) for rounds in done.values()]
        within = sum(1 for s in small if s <= bound)
        print(
            f"  {name}: small groups done by round {min(small)}..{max(small)} "
            f"(median {statistics.median(small):.0f}); within the bound {within}/{SMALL_GROUPS}; "
            f"big group done by {max(done['big'])}; Jain's index over rounds 1..{window}: "
            f"{jain(counts):.3f}"
        )


def many_groups(url: str, client: redis.Redis) -> None:
    n = 10_000
    client.flushall()
    base = int(client.info("memory")["used_memory"])
    with Queue("plain", url) as q:
        for start in range(0, n, BATCH):
            q.enqueue_many([{"payload": {}, "task_id": f"t{start + i}"} for i in range(BATCH)])
    plain = int(client.info("memory")["used_memory"]) - base
    plain_calls = timed_drain(url, client, "plain")
    client.flushall()
    base = int(client.info("memory")["used_memory"])
    with Queue("many", url) as q:
        for prefix in ("t", "u"):
            for start in range(0, n, BATCH):
                ids = range(start, start + BATCH)
                q.enqueue_many(
                    [{"payload": {}, "task_id": f"{prefix}{i}", "group": f"g{i}"} for i in ids]
                )
    active = int(client.info("memory")["used_memory"]) - base
    claims = timed_drain(url, client, "many")
    with Queue("many", url) as q:
        left = q.stats()["pending"]
        prefix = q.keys.prefix
    group_keys = [
        k
        for k in client.scan_iter(match=f"*{prefix[-6:]}*", count=10_000)
        if not k.decode().startswith(prefix + "task:")
    ]
    print(f"\n{n:,} active groups, 2 tasks each, drained by claims of {SLOTS}:")
    print(f"  claim/complete calls {len(claims)}: slowest {max(claims)} µs, "
          f"median {statistics.median(claims):.0f} µs (SLOWLOG, every call logged); ungrouped, "
          f"{n:,} tasks: {len(plain_calls)} calls, slowest {max(plain_calls)} µs, median "
          f"{statistics.median(plain_calls):.0f} µs")  # fmt: skip
    print(f"  memory: {active / (2 * n):.0f} B per pending grouped task ({active / n:.0f} B per "
          f"group with 2 tasks) against {plain / n:.0f} B per ungrouped task; pending left {left}, "
          f"keys left but task hashes: {sorted(k.decode() for k in group_keys)}")  # fmt: skip


def timed_drain(url: str, client: redis.Redis, name: str) -> list[int]:
    """Drain the queue by claims of SLOTS; every script call's time (µs, SLOWLOG)."""
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 2_000_000)  # script commands are logged too
    client.slowlog_reset()
    asyncio.run(drain_plain(url, name))
    entries = client.slowlog_get(2_000_000)
    client.config_set("slowlog-log-slower-than", 10_000)
    return [int(e["duration"]) for e in entries if b"EVALSHA" in _cmd(e)]


def _cmd(entry: dict[str, object]) -> bytes:
    command = entry.get("command", b"")
    return command if isinstance(command, bytes) else str(command).encode()


async def drain_plain(url: str, name: str) -> None:
    client = redis.asyncio.Redis.from_url(url)
    broker = Broker(name, client, "bench", "1")
    try:
        running: list[tuple[str, str, None]] = []
        while True:
            if running:
                _, claimed = await broker.complete_and_claim(running, SLOTS)
            else:
                claimed = await broker.claim(SLOTS)
            running = [(t.id, t.token, None) for t in claimed.tasks]
            if not running:
                return
    finally:
        await broker.close()
        await client.aclose()


def main() -> int:
    with redis_server() as (url, version):
        client = redis.Redis.from_url(url)
        print(f"redis {version}")
        try:
            if not os.environ.get("ONLY_MANY"):
                skewed(url, client)
            many_groups(url, client)
        finally:
            client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
