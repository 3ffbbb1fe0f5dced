"""Each script call names only the keys its script uses, read off a real server's MONITOR."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from taskfleet import AsyncQueue, Queue
from taskfleet.protocol.bundle import manifest
from taskfleet.protocol.calls import run
from taskfleet.protocol.follow import follow_join
from taskfleet.protocol.keys import QueueKeys

from tests.fixtures_redis import MakeBroker, RedisServer
from tests.fixtures_redis_cluster import REDIS_CLI
from tests.polling import wait_for

#: Keys of features a plain task has none of: flows, groups, budgets and claim pauses,
#: worker levels (and the worker records only their check reads).
FEATURE_KEYS = frozenset(
    {
        "waiting",
        "dependants",
        "flow_backlog",
        "flow",
        "flows",
        "groups",
        "group_pending",
        "group_running",
        "group",
        "group_bucket",
        "groups_parked",
        "groups_pending",
        "quota",
        "bucket_cost",
        "levels",
        "workers",
    }
)


@contextmanager
def monitored(server: RedisServer, tmp_path: Path) -> Iterator[Callable[[], list[list[str]]]]:
    """MONITOR of ``server`` while the block runs; yields what reads the commands it saw,
    each as its words (the client or ``lua`` first)."""
    log = tmp_path / "monitor.log"
    client = redis.Redis(port=server.port)
    with log.open("wb") as out:
        monitor = subprocess.Popen(
            [REDIS_CLI, "-p", str(server.port), "monitor"], stdout=out, stderr=subprocess.STDOUT
        )

    def commands() -> list[list[str]]:
        out = []
        for line in log.read_text(errors="replace").splitlines():
            found = re.match(r"^[\d.]+ \[\d+ ([^\]]+)\] (.*)$", line)
            if found:
                out.append([found.group(1).split(":")[0], *shlex.split(found.group(2))])
        return out

    try:
        wait_for(lambda: client.echo("monitor-ready") and "monitor-ready" in log.read_text())
        yield commands
        wait_for(lambda: client.echo("monitor-done") and "monitor-done" in log.read_text())
    finally:
        monitor.terminate()
        monitor.wait()
        client.close()


def _calls(commands: list[list[str]], sha: str) -> list[list[str]]:
    """The KEYS of each EVALSHA of ``sha`` among ``commands``."""
    return [c[4 : 4 + int(c[3])] for c in commands if c[1].upper() == "EVALSHA" and c[2] == sha]


def test_a_plain_enqueue_names_only_the_keys_its_script_touches_and_no_feature_key(
    redis_server: RedisServer, redis_url: str, tmp_path: Path
) -> None:
    scripts = manifest()["scripts"]
    uses = scripts["enqueue_plain"]["uses_keys"]
    keys = QueueKeys("jobs")
    named = dict(zip(keys.script("enqueue_plain"), uses, strict=True))
    with Queue("jobs", redis_url) as queue:
        queue.enqueue({})  # the script loaded: each call below is one EVALSHA
        with monitored(redis_server, tmp_path) as commands:
            queue.enqueue({})
            queue.enqueue({}, delay=60)
            queue.configure_events()  # the last call writes its event: every key is touched
            run(queue.client, follow_join(keys, "followed"))  # and to its follow stream
            queue.enqueue({}, deadline=60, task_id="followed")
    seen = commands()
    calls = _calls(seen, scripts["enqueue_plain"]["sha1"])
    assert len(calls) == 3
    assert all(call == list(named) for call in calls), calls
    assert not FEATURE_KEYS & set(uses)
    assert all(c[1].upper() != "EVALSHA" or c[2] == scripts["enqueue_plain"]["sha1"] for c in seen)
    # every key a command of the script named, as the call's key it is or is built from
    touched = {
        next(k for k in named if word == k or (k.endswith(":") and word.startswith(k)))
        for c in seen
        if c[0] == "lua"
        for word in c[2:]
        if word.startswith(keys.prefix)
    }
    # all and only the named keys: the three calls touched every one, and nothing else
    assert {named[k] for k in touched} == set(uses)


def test_a_plain_enqueue_with_an_idle_worker_is_handed_to_it_through_the_whole_enqueue(
    redis_server: RedisServer,
    redis_url: str,
    make_broker: MakeBroker,
    tmp_path: Path,
) -> None:
    worker = make_broker("jobs")
    worker.register(1)
    assert worker.claim(1, idle_ms=60_000).tasks == []
    scripts = manifest()["scripts"]
    with Queue("jobs", redis_url) as queue:
        # both scripts loaded, so each call below is one EVALSHA: a delayed plain task
        # (stored by the lean script), a grouped one on another queue (the whole enqueue)
        queue.enqueue({"n": 0}, delay=60)
        with Queue("warm", redis_url) as warm:
            warm.enqueue({"n": 0}, group="g")
        with monitored(redis_server, tmp_path) as commands:
            task_id = queue.enqueue({"n": 1})
    seen = commands()
    # the lean call stored nothing and left the hand-off to enqueue, which claimed the task
    assert len(_calls(seen, scripts["enqueue_plain"]["sha1"])) == 1
    assert _calls(seen, scripts["enqueue"]["sha1"]) == [list(QueueKeys("jobs").script("enqueue"))]
    stored = queue.get(task_id)
    assert stored is not None and stored.state.value == "running"
    assert queue.client.llen(QueueKeys("jobs").wake(worker.pod)) == 1
    assert queue.stats()["enqueued"] == 2


def test_an_async_plain_enqueue_with_an_idle_worker_is_handed_to_it_too(
    redis_url: str, make_broker: MakeBroker, queue: Queue
) -> None:
    worker = make_broker("jobs")
    worker.register(1)
    assert worker.claim(1, idle_ms=60_000).tasks == []

    async def enqueue() -> str:
        async with AsyncQueue("jobs", redis_url) as aq:
            return await aq.enqueue({"n": 1})

    task_id = asyncio.run(enqueue())
    stored = queue.get(task_id)
    assert stored is not None and stored.state.value == "running"
    assert queue.client.llen(QueueKeys("jobs").wake(worker.pod)) == 1
