"""taskfleet's Node client: its producer (Queue) and the `taskfleet-node worker` command."""

from __future__ import annotations

import os
import shutil
import tempfile

from external import NODE_DIR, TASKFLEET_NODE, ExternalAdapter, Producer, need

QUEUE = "bench"
CONCURRENCY = int(os.environ.get("BENCH_TASKFLEET_CONCURRENCY", "32"))


class TaskfleetNodeAdapter(ExternalAdapter):
    name = "taskfleet (Node)"
    batch_method = "Queue.enqueueMany (one script call per batch)"
    worker_config = (
        f"2 x `taskfleet-node worker --concurrency {CONCURRENCY}` (handler on the event loop)"
    )

    def __init__(self, redis_url: str):
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
                *("--concurrency", str(CONCURRENCY), "--pod", f"bench-node-{i}"),
                *("--runtime-dir", os.path.join(self.runtime, str(i))),
                *("--log-level", "warning", "--redis-url", self.redis_url),
            ]
            for i in range(processes)
        ]

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.runtime, ignore_errors=True)


def make_adapter(redis_url: str) -> TaskfleetNodeAdapter:
    return TaskfleetNodeAdapter(redis_url)
