"""BullMQ: its producer (bench/node/producer.mjs) and worker (bench/node/bullmq_worker.mjs)."""

from __future__ import annotations

from external import NODE_DIR, ExternalAdapter, Producer, need


class BullmqAdapter(ExternalAdapter):
    batch_method = "Queue.addBulk (one call per batch)"

    def __init__(self, redis_url: str, concurrency: int | None):
        super().__init__(
            Producer(["node", str(need(NODE_DIR / "producer.mjs")), "bullmq"], redis_url)
        )
        self.given = concurrency
        self.concurrency = 1 if concurrency is None else concurrency  # BullMQ's default: 1
        if concurrency is None:
            self.name = "bullmq"
            self.worker_config = "2 x `new Worker(...)` in Node, its defaults (concurrency 1)"
        else:
            self.name = f"bullmq (concurrency {concurrency})"
            self.worker_config = f"2 x `new Worker(..., {{ concurrency: {concurrency} }})` in Node"

    def worker_argvs(self, processes: int) -> list[list[str]]:
        argv = ["node", str(NODE_DIR / "bullmq_worker.mjs")]
        if self.given is not None:
            argv = ["env", f"BENCH_BULLMQ_CONCURRENCY={self.given}", *argv]
        return [argv] * processes


def make_adapter(redis_url: str, variant: str | None = None) -> BullmqAdapter:
    return BullmqAdapter(redis_url, int(variant) if variant else None)
