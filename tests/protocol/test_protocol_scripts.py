"""The Lua scripts as a protocol: layout, one cluster slot, server restarts, config."""

from __future__ import annotations

import asyncio
import re
from importlib import resources

import pytest
import redis
import redis.asyncio
from pydantic import ValidationError
from taskfleet import Broker, Queue, QueueConfig, TaskState
from taskfleet.protocol.bundle import NAMES, manifest, source
from taskfleet.protocol.errors import InvalidPayload
from taskfleet.protocol.keys import SCRIPT_KEYS, SHARED_KEYS, QueueKeys

from tests.fixtures_redis import BlockingBroker, MakeBroker, RedisServerFactory, free_cluster_port
from tests.operations import run_every_operation
from tests.polling import wait_for

LUA = resources.files("taskfleet.protocol").joinpath("lua")


@pytest.mark.parametrize("name", NAMES)
def test_each_script_opens_with_a_block_saying_what_it_does_and_replies(name: str) -> None:
    text = LUA.joinpath(f"{name}.lua").read_text()
    header = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        header.append(line)
    block = "\n".join(header)
    assert block.startswith(f"-- {name}:")
    assert "Arguments:" in block
    assert "Returns:" in block


def test_scripts_never_spell_a_key_name_themselves() -> None:
    # key names live in keys.py; Lua only uses the K_* names bound from KEYS
    for path in [*LUA.iterdir(), *LUA.joinpath("includes").iterdir()]:
        if path.name.endswith(".lua"):
            code = "\n".join(
                line for line in path.read_text().splitlines() if not line.lstrip().startswith("--")
            )
            assert "tf:" not in code, path.name
            assert not re.search(r"KEYS\[", code), path.name
            # arguments by name (ARG_*, RECORD(i): generated from signatures.py), never by
            # position
            assert not re.search(r"ARGV\[", code), path.name


@pytest.mark.parametrize("name", NAMES)
def test_the_bundle_says_keys_and_arguments_by_position_in_the_uses_keys_order(
    name: str,
) -> None:
    """The prelude names each key the script uses, in its uses_keys order; the code says
    KEYS[i] (a shared key: its string) and ARGV[i] where the sources say K_<NAME> and
    ARG_<NAME>, and binds no local to them (a captured local costs every call)."""
    text = source(name)
    named = dict(re.findall(r"^-- (K_[A-Z_]+|ARG_[A-Z_]+) = (.+)$", text, re.M))
    uses = manifest()["scripts"][name]["uses_keys"]
    keys = {n: v for n, v in named.items() if v.startswith("KEYS[")}
    assert list(keys.items()) == [(f"K_{k.upper()}", f"KEYS[{i}]") for i, k in enumerate(uses, 1)]
    assert [k for k in SCRIPT_KEYS if k in uses] == uses
    # the keys every queue shares (provider quotas) are constants, never from KEYS
    shared = {n: v for n, v in named.items() if n.startswith("K_") and n not in keys}
    assert shared == {
        f"K_{k.upper()}": f'"{SHARED_KEYS[k][0]}"'
        for k in SHARED_KEYS
        if f"K_{k.upper()}" in shared
    }
    arguments = [p["name"] for p in manifest()["scripts"][name]["args"]]
    assert [(n, v) for n, v in named.items() if n.startswith("ARG_")] == [
        (f"ARG_{a.upper()}", f"ARGV[{i}]") for i, a in enumerate(arguments, 1)
    ]
    code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    assert not re.search(r"\b(K|ARG)_[A-Z_]+\b", code), "a name the bundle left unbound"
    assert {int(i) for i in re.findall(r"\bKEYS\[(\d+)\]", code)} == set(range(1, len(uses) + 1)), (
        "each key sent is used, and none beyond"
    )
    for value in shared.values():
        assert value in code
    queue_keys = QueueKeys("jobs")
    assert queue_keys.script(name) == tuple(
        queue_keys.script_keys[SCRIPT_KEYS.index(k)] for k in uses
    )


def test_every_key_of_a_queue_shares_its_hash_tag() -> None:
    keys = QueueKeys("jobs")
    assert all(k.startswith("tf:{jobs}:") for k in keys.script_keys)
    assert keys.task("x") == "tf:{jobs}:task:x"


@pytest.mark.parametrize("name", ["", "a{b}", "a:b", "with space", "-lead", "x" * 201])
def test_a_queue_name_that_would_break_key_layout_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid queue name"):
        QueueKeys(name)


def test_every_operation_runs_on_a_redis_cluster_node_in_one_slot(
    redis_server_factory: RedisServerFactory, make_broker: MakeBroker
) -> None:
    # A cluster node refuses a script whose declared keys span slots (CROSSSLOT); keys a
    # script builds itself (task:<id>, pod:<pod>) are checked by their names afterwards.
    server = redis_server_factory(
        persistent=False, port=free_cluster_port(), extra_args=["--cluster-enabled", "yes"]
    )
    client = redis.Redis.from_url(server.url)
    client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)  # type: ignore[no-untyped-call]
    wait_for(lambda: b"cluster_state:ok" in client.execute_command("CLUSTER", "INFO"))  # type: ignore[no-untyped-call]
    queue = Queue("jobs", client=client)

    def make(pod: str, incarnation: str) -> BlockingBroker:
        return make_broker("jobs", pod, incarnation, url=server.url)

    run_every_operation(queue, make)
    client.close()


def test_scripts_are_loaded_again_after_redis_restarts_and_state_survives(
    redis_server_factory: RedisServerFactory,
) -> None:
    server = redis_server_factory()
    queue = Queue("jobs", redis_url=server.url)
    first = queue.enqueue({"x": 1})
    server.restart()
    wait_for(lambda: _answers(queue.client))
    second = queue.enqueue({"x": 2})
    assert queue.stats()["pending"] == 2
    assert queue.get(first) is not None
    assert queue.get(second) is not None
    queue.close()


def test_a_worker_claims_again_after_redis_restarts_with_its_tasks_kept(
    redis_server_factory: RedisServerFactory, make_broker: MakeBroker
) -> None:
    server = redis_server_factory()
    queue = Queue("jobs", redis_url=server.url)
    ids = queue.enqueue_many([{"payload": {"i": i}} for i in range(2)])
    worker = make_broker("jobs", url=server.url)
    [first] = worker.claim(1).tasks
    server.restart()  # the server forgets its scripts; the AOF keeps the data
    wait_for(lambda: _answers(queue.client))

    # the first use of a dropped connection may fail once
    claimed = wait_for(lambda: worker.claim(1).tasks, ignoring=(redis.ConnectionError,))
    assert [t.id for t in claimed] == [ids[1]]
    assert worker.complete_many([(first.id, first.token, None)]) == [True]
    queue.close()


def _answers(client: redis.Redis | redis.RedisCluster) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def test_scripts_use_the_config_defaults_when_the_queue_has_no_config(
    redis_url: str, make_broker: MakeBroker
) -> None:
    queue = Queue("jobs", redis_url=redis_url)
    task_id = queue.enqueue({"x": 1})
    assert queue.get(task_id).max_attempts == QueueConfig().max_attempts  # type: ignore[union-attr]
    worker = make_broker("jobs")
    [task] = worker.claim(1).tasks
    lease = queue.client.zscore(queue.keys.running, task_id)
    sec, usec = queue.client.time()
    now = int(sec) * 1000 + int(usec) // 1000
    assert lease is not None
    assert now < lease <= now + QueueConfig().lease_ttl_s * 1000
    assert task.timeout is None
    queue.close()


def test_configure_round_trips_and_replaces_the_whole_config(redis_url: str) -> None:
    queue = Queue("jobs", redis_url=redis_url)
    assert queue.config() == QueueConfig()
    wanted = QueueConfig(max_concurrency=4, rate_limit_tasks=10, default_timeout_s=2.5)
    queue.configure(wanted)
    assert queue.config() == wanted
    queue.configure(QueueConfig(max_attempts=9))
    assert queue.config() == QueueConfig(max_attempts=9)
    queue.close()


def test_bad_config_values_are_refused_with_the_field_named() -> None:
    with pytest.raises(ValidationError, match="backoff_jitter"):
        QueueConfig(backoff_jitter=2)
    with pytest.raises(ValidationError, match="backoff_max_s must be >= backoff_base_s"):
        QueueConfig(backoff_base_s=10, backoff_max_s=1)


def test_queue_repr_never_shows_the_redis_url(redis_url: str) -> None:
    queue = Queue("jobs", redis_url=redis_url.replace("redis://", "redis://:s3cret@"))
    assert "s3cret" not in repr(queue)
    queue.close()


def test_queue_and_broker_work_on_clients_that_decode_responses(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    queue = Queue("jobs", client=client)
    task_id = queue.enqueue({"x": "é"})
    runner = asyncio.Runner()
    aclient = runner.run(_decoding_async_client(redis_url))
    broker = Broker("jobs", aclient, "pod-a", "1")
    try:
        runner.run(broker.register(1))
        [task] = runner.run(broker.claim(1)).tasks
        assert (task.id, task.payload) == (task_id, {"x": "é"})
        assert runner.run(broker.heartbeat({task.id: task.token})) == set()
        assert runner.run(broker.complete_many([(task.id, task.token, '"ok"')])) == [True]
        stored = queue.get(task_id)
        assert stored is not None
        assert (stored.state, stored.result) == (TaskState.DONE, "ok")
        assert queue.stats()["done"] == 1
        assert [w.pod for w in queue.workers()] == ["pod-a"]
    finally:
        runner.run(broker.close())
        runner.run(aclient.aclose())
        runner.close()
        client.close()


async def _decoding_async_client(url: str) -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(url, decode_responses=True)


def test_a_scheduled_payload_is_bounded_in_the_script_like_an_enqueued_one(queue: Queue) -> None:
    queue.configure(QueueConfig(max_payload_bytes=100))

    with pytest.raises(InvalidPayload, match="the queue allows 100 \\(max_payload_bytes\\)"):
        queue.schedule("big", "0 * * * *", {"blob": "x" * 200})
    # Nothing stored: a smaller payload makes the schedule.
    assert queue.schedules() == []
    assert queue.schedule("big", "0 * * * *", {"blob": "small"}).payload == {"blob": "small"}
