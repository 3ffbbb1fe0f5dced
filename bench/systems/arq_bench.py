"""arq: the adapter and the reference no-op task (runs in bench/.peers/arq)."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import arq
from arq.connections import ArqRedis, RedisSettings, create_pool
from harness import DONE_KEY


async def noop(ctx: dict[str, Any]) -> None:
    # arq handlers are async; the single write goes through the worker's own pool.
    await ctx["redis"].rpush(DONE_KEY, os.getpid())


class WorkerSettings:
    """Loaded by `arq arq_bench.WorkerSettings`; arq's defaults otherwise (max_jobs 10,
    poll_delay 0.5 s: arq polls its queue, so idle latency is bound by that delay)."""

    functions = [noop]  # noqa: RUF012 - arq reads a plain class attribute
    redis_settings = RedisSettings.from_dsn(os.environ.get("BENCH_REDIS_URL", "redis://"))


class ArqAdapter:
    name = "arq"
    version = arq.VERSION
    # arq has no batch API; concurrent enqueue_job calls on one pool is the arq idiom.
    batch_method = "asyncio.gather of enqueue_job (no batch API)"
    worker_config = "2 x `arq arq_bench.WorkerSettings` (max_jobs 10, poll_delay 0.5 s)"

    def __init__(self, redis_url: str):
        self.loop = asyncio.new_event_loop()
        self.pool: ArqRedis = self.loop.run_until_complete(
            create_pool(RedisSettings.from_dsn(redis_url))
        )

    async def _single(self, n: int) -> None:
        for _ in range(n):
            await self.pool.enqueue_job("noop")

    async def _batches(self, n: int, batch: int) -> None:
        for start in range(0, n, batch):
            size = min(batch, n - start)
            await asyncio.gather(*(self.pool.enqueue_job("noop") for _ in range(size)))

    def enqueue_single(self, n: int) -> None:
        self.loop.run_until_complete(self._single(n))

    def enqueue_batches(self, n: int, batch: int) -> None:
        self.loop.run_until_complete(self._batches(n, batch))

    def enqueue_one(self) -> None:
        self.loop.run_until_complete(self.pool.enqueue_job("noop"))

    def purge(self) -> None:
        self.loop.run_until_complete(self.pool.flushdb())

    def worker_argvs(self, processes: int) -> list[list[str]]:
        argv = [sys.executable, "-m", "arq", "arq_bench.WorkerSettings"]
        return [argv] * processes

    def close(self) -> None:
        self.loop.run_until_complete(self.pool.aclose())
        self.loop.close()


def make_adapter(redis_url: str) -> ArqAdapter:
    return ArqAdapter(redis_url)
