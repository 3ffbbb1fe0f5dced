"""Every page of the dashboard as the docs show it: the name of its screenshot
(``docs/images/dashboard-<name>.png``) and its path on the showcase queue, and the
showcase itself: a queue with what each page is for (groups, a claim pause, dead tasks of
several errors, a long job's progress and output, a flow, schedules, a silent worker, a
paused provider quota, an hour of per-minute counts)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskfleet.producer.flows import chain, chord, group
from taskfleet.producer.queue import Queue
from taskfleet.protocol.calls import run
from taskfleet.protocol.control_ops import Report
from taskfleet.protocol.groups import GroupSettings
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.output import emit_op
from taskfleet.protocol.provider_quota import ProviderQuotaOps
from taskfleet.protocol.scripts import SyncScripts

from tests.dashboard_fixtures import older_worker

REPO = Path(__file__).resolve().parents[1]
IMAGES = REPO / "docs" / "images"

#: name -> path (``{task}``: the showcase's dead task; ``{running}``: its long job)
PAGES = {
    "queues": "/",
    "queue": "/queues/llm-summaries",
    "pending": "/queues/llm-summaries/tasks/pending",
    "running": "/queues/llm-summaries/tasks/running",
    "waiting": "/queues/llm-summaries/tasks/waiting",
    "dead": "/queues/llm-summaries/tasks/dead",
    "task": "/queues/llm-summaries/tasks/id/{task}",
    "output": "/queues/llm-summaries/tasks/id/{running}",
    "schedules": "/queues/llm-summaries/schedules",
    "flows": "/queues/llm-summaries/flows",
    "workers": "/workers",
    "quotas": "/quotas",
}

QUEUE = "llm-summaries"
TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/app/handlers.py", line 42, in summarise\n'
    '    text = doc["summary"]\n'
)


@dataclass(frozen=True)
class Showcase:
    dead_id: str
    #: the long job (running) and its run's claim token
    running_id: str
    running_token: str

    def emit(self, queue: Queue, text: str) -> str:
        """A chunk of the long job's output, as its handler's ``emit`` writes it."""
        op = emit_op(queue.keys, self.running_id, self.running_token, "t", text)
        entry: str = SyncScripts.for_client(queue.client).run(op)
        return entry


def screenshot(name: str) -> Path:
    return IMAGES / f"dashboard-{name}.png"


def showcase(queue: Queue, make_broker: Callable[..., Any]) -> Showcase:
    """The showcase on ``queue`` (named ``QUEUE``)."""
    queue.set_group("tenant-acme", GroupSettings(weight=2))
    broker = make_broker(queue.name, pod="worker-7f9c-0", incarnation="a1")
    broker.register(8)
    failures = [
        (TRACE + "KeyError: 'summary'", "tenant-acme"),
        (TRACE + "KeyError: 'summary'", "tenant-globex"),
        (TRACE + "KeyError: 'summary'", "tenant-acme"),
        ("openai.RateLimitError: 429 Too Many Requests", "tenant-initech"),
        ("TimeoutError: upstream took 120 s", "tenant-acme"),
    ]
    dead = [
        queue.enqueue({"doc": 100 + i}, task="summarise", max_attempts=1, group=g)
        for i, (_, g) in enumerate(failures)
    ]
    long_job = queue.enqueue({"doc": 999}, task="embed-corpus", group="tenant-acme")
    claimed = {t.id: t for _ in range(len(dead) + 1) for t in broker.claim(1).tasks}
    for task_id, (error, _) in zip(dead, failures, strict=True):
        task = claimed[task_id]
        broker.fail(task.id, task.token, error, False)
    progress = json.dumps({"done": 412, "total": 1000, "message": "embedding chunk 412"})
    broker.report([Report(long_job, claimed[long_job].token, progress)])
    shown = Showcase(dead[0], long_job, claimed[long_job].token)
    shown.emit(queue, "Loaded 1,000 chunks of the corpus.\n")
    shown.emit(queue, "Embedding with text-embedding-3-small…\n")
    # a provider quota, paused, that a task of the queue waits for (left delayed by a claim)
    scripts = SyncScripts.for_client(queue.client)
    openai = ProviderQuotaOps("openai")
    scripts.run(openai.configure({"requests": 500, "input_tokens": 200_000}, 60_000, 8))
    queue.enqueue({"doc": 7}, task="summarise", quotas={"openai": {"requests": 1}})
    scripts.run(openai.pause(900_000, "OpenAI 429 storm"))
    assert broker.claim(1).tasks == []
    for tenant, n in (("tenant-acme", 14), ("tenant-globex", 9), ("tenant-initech", 6)):
        queue.enqueue_many(
            [{"payload": {"doc": i}, "group": tenant, "task": "summarise"} for i in range(n)]
        )
    pages = group(*({"payload": {"page": i}, "task": "fetch-page"} for i in range(3)))
    queue.enqueue_flow(
        chain({"payload": {"url": "https://example.com"}}, chord(pages, {"payload": {}}))
    )
    queue.schedule("nightly-digest", "0 3 * * *", {"kind": "digest"}, tz="Europe/Paris")
    queue.schedule("weekly-report", "0 8 * * MON", {"kind": "report"}, paused=True)
    queue.pause_claims(1800, reason="OpenAI 429 storm", group="tenant-initech")
    older_worker(queue, "worker-7f9c-1", beat_ago_ms=600_000)
    # the last hour's per-minute counts, as the scripts write them: what the charts draw
    now = run(queue.client, queue.reads.clock()) // 60_000
    for ago in range(60, -1, -1):
        done = 1800 + int(900 * math.sin(ago / 6)) + (1200 if 20 <= ago <= 24 else 0)
        failed = 30 + (400 if 18 <= ago <= 22 else 0)
        queue.client.hset(
            QueueKeys(queue.name).rate(now - ago), mapping={"completed": done, "failed": failed}
        )
    return shown
