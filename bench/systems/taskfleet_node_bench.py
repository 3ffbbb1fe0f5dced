"""taskfleet's Node client: its producer (Queue) and the `taskfleet-node worker` command."""

from __future__ import annotations

import os
import shutil
import tempfile

from external import NODE_DIR, TASKFLEET_NODE, ExternalAdapter, Producer, need

QUEUE = "bench"
CONCURRENCY = int(os.environ.get("BENCH_TASKFLEET_CONCURRENCY", "32"))


class TaskfleetNodeAdapter(ExternalAdapter):
    batch_method = "Queue.enqueueMany (one script call per batch)"

    def __init__(self, redis_url: str, concurrency: int | None = None):
        # No variant: the slots run.py's --taskfleet-concurrency gives (32 by default), the
        # row "taskfleet (Node)"; a variant names its slots, to set beside a peer's same.
        self.concurrency = CONCURRENCY if concurrency is None else concurrency
        self.name = "taskfleet (Node)"
        if concurrency is not None:
            self.name = f"taskfleet (Node, concurrency {concurrency})"
        self.worker_config = (
            f"2 x `taskfleet-node worker --concurrency {self.concurrency}`"
            " (handler on the event loop)"
        )
        entry = need(TASKFLEET_NODE / "index.js")
        producer = ["node", str(need(NODE_DIR / "producer.mjs")), "taskfleet", str(entry)]
        super().__init__(Producer(producer, redis_url))
        self.redis_url = redis_url
        self.runtime = tempfile.mkdtemp(prefix="bench-taskfleet-node-")

    def worker_argvs(self, processes: int) -> list[list[str]]:
        # The same flags as the Python rows': distinct names and runtime dirs, warning logs.
        return [
            [
                *("node", str(TASKFLEET_NODE / "taskfleet-node.js"), "worker", "--queue", QUEUE),
                *("--handler", "./tasks.mjs:noop", "--app-dir", str(NODE_DIR)),
                *("--concurrency", str(self.concurrency), "--pod", f"bench-node-{i}"),
                *("--runtime-dir", os.path.join(self.runtime, str(i))),
                *("--log-level", "warning", "--redis-url", self.redis_url),
            ]
            for i in range(processes)
        ]

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.runtime, ignore_errors=True)


def make_adapter(redis_url: str, variant: str | None = None) -> TaskfleetNodeAdapter:
    return TaskfleetNodeAdapter(redis_url, int(variant) if variant else None)
