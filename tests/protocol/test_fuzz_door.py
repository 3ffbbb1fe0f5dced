"""Fuzzing the door: every number and string a producer, a CLI flag or a queue's config can
carry, driven through enqueue -> claim -> run -> complete against a real Redis and a real
``taskfleet worker`` process.

Whatever hypothesis draws (nan, inf, -0.0, 1e308, 5e-324, 2**63, 10**30, bools, lone
surrogates, NUL, right-to-left marks, emoji, very long text, percent-encoding), it must
hold that:

- an input the door refuses raises a ``TaskfleetError`` (the CLI: exit 2 or, for a
  conflicting id, 1, with one ``taskfleet: error:`` line), never a bare TypeError,
  ValueError or traceback;
- an accepted task is readable (``Queue.get``, ``stats``, ``taskfleet task``) and ends
  ``done`` or ``dead`` with a reason within a deadline (unless it was delayed on purpose);
- the worker never exits non-zero, and no script call is slow (Redis ``SLOWLOG``).

The module has its own redis-server and one worker for all examples, so the fast tier
stays fast; example counts are modest.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from taskfleet import InvalidPayload, Queue, QueueConfig, TaskfleetError, TaskState
from taskfleet.cli import main as cli_main
from taskfleet.protocol import bounds
from taskfleet.protocol.numbers import SAFE_INTEGER_MAX

from tests.fixtures_redis import MakeBroker, RedisServer
from tests.polling import wait_for
from tests.workers import breaking
from tests.workers.harness import FAST, WorkerProcess

QUEUE = "fuzz"
#: A script call slower than this is a bug (an unbounded loop), even on a loaded 2-core
#: machine: the slowest calls here are batches of a few tasks (tens of microseconds).
SLOW_SCRIPT_US = 50_000
#: An accepted task not delayed on purpose must be done or dead within this.
FINISH_S = 20.0
#: Accepted tasks delayed longer than this are only checked to be readable and delayed.
SHORT_DELAY_S = 0.5

FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- strategies ---------------------------------------------------------------------------

EXTREME_FLOATS = [
    math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, -5e-324, 1e-300, 1e308, -1e308,
    0.001, 0.5, 1.0, 60.0, 3e11, 1e14, 1e16, float(2**63),
]  # fmt: skip
HUGE_INTS = [
    0, 1, -1, 2, 7, 1000, 1001, -1001, 10_000, 10_001, 10**9, 10**9 + 1, 10**14, 10**16,
    2**53 + 1, 2**63, 2**64, -(2**63), 10**30, 10**400,
]  # fmt: skip
SPECIAL_TEXT = [
    "", " ", "\x00", "a\x00b", "\ud800", "\udcff", "\u202eevil", "\u200f", "😀", "👩‍👩‍👧",
    "%00", "%2F..%2F", "%F0%9F%98%80", "%ZZ", "\\", '"', "'", "\n", "\t", "x" * 10_000,
    "ß" * 201, "tf:{other}:task:x", "*", "[", "nan", "inf", "1e400",
]  # fmt: skip

#: The integers every reader holds exactly (the number rule, docs/protocol.md section 1)
SAFE_INTEGERS = st.integers(-SAFE_INTEGER_MAX, SAFE_INTEGER_MAX)
numbers = st.one_of(
    st.sampled_from(EXTREME_FLOATS),
    st.sampled_from(HUGE_INTS),
    st.floats(),
    st.integers(),
    st.booleans(),
)
texts = st.one_of(
    st.sampled_from(SPECIAL_TEXT),
    st.text(max_size=30),
    st.text(st.characters(categories=["Cs", "Cc", "Cf", "Co", "Zl", "Zp"]), max_size=8),
)
json_scalars = st.one_of(
    st.none(), st.booleans(), st.sampled_from(EXTREME_FLOATS), st.sampled_from(HUGE_INTS), texts
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
utf8_text = st.text(st.characters(codec="utf-8"), max_size=20)
plain_json = st.recursive(
    st.none()
    | st.booleans()
    | SAFE_INTEGERS
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(utf8_text, inner, max_size=3),
    max_leaves=6,
)
plain_dicts = st.dictionaries(utf8_text, plain_json, max_size=4)
payloads: st.SearchStrategy[Any] = st.one_of(
    plain_dicts,
    plain_dicts,
    plain_dicts,
    plain_dicts,
    st.dictionaries(texts, json_values, max_size=4),
    json_values,  # mostly not an object: must be refused
)
durations = st.one_of(
    st.none(), numbers, st.timedeltas(min_value=timedelta(0), max_value=timedelta(seconds=2))
)
task_ids = st.one_of(st.none(), st.none(), texts, st.sampled_from(HUGE_INTS))


#: Values the door takes for each enqueue field, its bounds included.
VALID: dict[str, st.SearchStrategy[Any]] = {
    "priority": st.integers(bounds.PRIORITY_MIN, bounds.PRIORITY_MAX)
    | st.sampled_from([bounds.PRIORITY_MIN, bounds.PRIORITY_MAX]),
    "cost": st.integers(bounds.MIN_COST, bounds.MAX_COST)
    | st.sampled_from([bounds.MIN_COST, bounds.MAX_COST]),
    "max_attempts": st.none() | st.integers(bounds.MIN_ATTEMPTS, 3) | st.just(bounds.MAX_ATTEMPTS),
    "delay": st.none()
    | st.floats(0, 0.2)
    | st.sampled_from([0, -0.0, 5e-324, timedelta(0), bounds.MAX_DELAY_S]),
    "deadline": st.none()
    | st.floats(0.001, 60)
    | st.sampled_from([5e-324, 0.001, timedelta(seconds=1), bounds.MAX_DEADLINE_S]),
    "timeout": st.none()
    | st.floats(0.01, 10)
    | st.sampled_from([5e-324, 0.001, 10, timedelta(hours=1), bounds.MAX_TIMEOUT_S]),
    "task_id": st.none()
    | st.uuids().map(str)
    | st.text(st.characters(codec="utf-8"), min_size=1, max_size=200).filter(str.isprintable),
}
EXTREME: dict[str, st.SearchStrategy[Any]] = {
    "priority": numbers,
    "cost": numbers,
    "max_attempts": numbers,
    "delay": durations,
    "deadline": durations,
    "timeout": durations,
    "task_id": task_ids,
}
#: Mostly values the door takes, else anything: a good share of examples gets through.
FIELDS = {name: st.one_of(valid, valid, valid, EXTREME[name]) for name, valid in VALID.items()}


@st.composite
def enqueue_kwargs(draw: st.DrawFn, *, short: bool = False, valid: bool = False) -> dict[str, Any]:
    """Keyword arguments of ``Queue.enqueue``, each field absent, plausible or extreme.

    ``short``: a task that keeps timing out is retried at most 3 times (for the
    end-to-end test, where 10,000 attempts would outlast any deadline). ``valid``: only
    values the door takes (its bounds included), so the task gets to the worker.
    """
    kwargs: dict[str, Any] = {"payload": draw(plain_dicts if valid else payloads)}
    for name, strategy in (VALID if valid else FIELDS).items():
        if draw(st.booleans()):
            kwargs[name] = draw(strategy)
    attempts = kwargs.get("max_attempts")
    if short and isinstance(attempts, int) and not isinstance(attempts, bool) and attempts > 3:
        kwargs["max_attempts"] = 3
    return kwargs


def _accepted_delay(kwargs: dict[str, Any]) -> float:
    delay = kwargs.get("delay")
    if isinstance(delay, timedelta):
        return delay.total_seconds()
    return float(delay) if delay else 0.0


# -- helpers ------------------------------------------------------------------------------


@dataclass
class CliRun:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str) -> CliRun:
    """``taskfleet ARGS`` in this process (the entry point, with its error handling)."""
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli_main(list(args))
        except SystemExit as exc:
            code = exc.code
    assert isinstance(code, int), (args, code, err.getvalue())
    return CliRun(code, out.getvalue(), err.getvalue())


def assert_one_error_line(run: CliRun) -> None:
    assert "Traceback" not in run.stderr, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("taskfleet: error: "), run.stderr


def assert_readable(queue: Queue, url: str, task_id: str) -> None:
    """Queue.get, stats and ``taskfleet task`` (text and JSON) all work on the task."""
    task = queue.get(task_id)
    assert task is not None, task_id
    assert task.created_at is not None and task.run_at is not None
    assert bounds.MIN_COST <= task.cost <= bounds.MAX_COST
    assert bounds.PRIORITY_MIN <= task.priority <= bounds.PRIORITY_MAX
    json.dumps(task.model_dump(mode="json"))
    queue.stats()
    for extra in ((), ("--json",)):
        # "--": an id may start with a dash, like an option
        shown = run_cli("task", "--redis-url", url, *extra, "--", queue.name, task_id)
        assert shown.code == 0, shown.stderr
        assert "Traceback" not in shown.stderr


def enqueue_or_refuse(queue: Queue, kwargs: dict[str, Any]) -> str | None:
    """The task's id if the door took it, None if it refused it with a TaskfleetError."""
    payload = kwargs.pop("payload")
    try:
        task_id = queue.enqueue(payload, **kwargs)
    except TaskfleetError as exc:
        event(f"refused: {type(exc).__name__}")
        return None  # anything else (TypeError, OverflowError, ...) fails the test
    event("accepted")
    return task_id


# -- fixtures -----------------------------------------------------------------------------


@dataclass
class FuzzWorld:
    server: RedisServer
    client: redis.Redis
    queue: Queue
    worker: WorkerProcess

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzWorld]:
    """A redis-server of this module's own (its SLOWLOG holds only our calls) and one
    worker running ``taskfleet.samples:echo`` for every example."""
    base = tmp_path_factory.mktemp("fuzz")
    server = RedisServer(base / "redis")
    server.start()
    client = redis.Redis.from_url(server.url)
    client.config_set("slowlog-log-slower-than", 10_000)  # microseconds
    client.config_set("slowlog-max-len", 1000)
    client.slowlog_reset()
    queue = Queue(QUEUE, client=client)
    # quick retries, so tasks failing on a tiny timeout end within the deadline
    queue.configure(QueueConfig(max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05))
    worker = WorkerProcess(
        redis_url=server.url,
        queue=QUEUE,
        handler="taskfleet.samples:echo",
        workdir=base,
        pod="fuzz-worker",
        args=[*FAST, "--concurrency", "4"],
    ).start()
    try:
        yield FuzzWorld(server, client, queue, worker)
    finally:
        worker.kill()
        client.close()
        server.stop()


# -- the door alone -----------------------------------------------------------------------


@FUZZ
@given(kwargs=enqueue_kwargs())
def test_every_producer_input_is_stored_readably_or_refused_with_a_taskfleet_error(
    queue: Queue, redis_url: str, kwargs: dict[str, Any]
) -> None:
    task_id = enqueue_or_refuse(queue, dict(kwargs))
    if task_id is not None:
        assert_readable(queue, redis_url, task_id)


@FUZZ
@given(items=st.lists(enqueue_kwargs(), max_size=4))
def test_a_batch_is_stored_whole_and_readable_or_refused_whole_with_a_taskfleet_error(
    queue: Queue, redis_url: str, items: list[dict[str, Any]]
) -> None:
    before = queue.stats()["enqueued"]
    try:
        ids = queue.enqueue_many(items)
    except TaskfleetError:
        assert queue.stats()["enqueued"] == before
        return
    assert len(ids) == len(items) == len(set(ids))
    for task_id in ids:
        assert_readable(queue, redis_url, task_id)


FLAG_TEXT = [
    "nan", "inf", "-inf", "-0", "-0.0", "0", "1", "2", "0.5", "1e308", "5e-324", "3e11",
    "1e14", "100000000000000", "1000000000", "1000000001", "9223372036854775808", "1e400",
    "-1", "1001", "-1001", "10000", "10001", "31536000", "31536001", "3153600000",
    "3153600001", "abc", "", " 1", "0x10", "1_000", "%31", "\udcff", "\u0661", "\u00bd",
]  # fmt: skip
FLAG_VALUES = st.one_of(
    st.sampled_from(FLAG_TEXT),
    st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=12),
)
CLI_FLAGS = ["--priority", "--delay", "--deadline", "--timeout", "--cost", "--max-attempts"]


@FUZZ
@given(
    flags=st.dictionaries(st.sampled_from(CLI_FLAGS), FLAG_VALUES, max_size=3),
    payload=st.one_of(st.none(), st.sampled_from(['{"a": NaN}', "[]", '{"x": 1e999}']), texts),
    task_id=st.one_of(st.none(), texts.filter(lambda t: "\x00" not in t)),
    count=st.sampled_from([None, "1", "2", "0", "-1", "1000001", "x"]),
)
def test_every_cli_flag_value_is_enqueued_or_refused_with_one_error_line(
    redis_url: str,
    flags: dict[str, str],
    payload: str | None,
    task_id: str | None,
    count: str | None,
) -> None:
    args = ["enqueue", QUEUE, "--redis-url", redis_url]
    for flag, value in flags.items():
        args += [flag, value]
    if payload is not None and "\x00" not in payload:
        args += ["--payload", payload]
    if task_id is not None:
        args += ["--id", task_id]
    if count is not None:
        args += ["--count", count]
    run = run_cli(*args)
    if run.code == 0:
        ids = run.stdout.split("\n")[:-1]
        assert ids, run
        with Queue(QUEUE, redis_url=redis_url) as queue:
            for one in ids:
                assert_readable(queue, redis_url, one)
        return
    assert_one_error_line(run)
    # 1 only for an id taken by another task; everything else is bad input
    assert run.code == 2 or (run.code == 1 and "exists with a different" in run.stderr), run


CONFIG_FIELDS = list(QueueConfig.model_fields)


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(CONFIG_FIELDS), numbers, max_size=4))
def test_a_queue_config_is_refused_by_its_model_or_works_with_every_script(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis, fields: dict[str, Any]
) -> None:
    try:
        config = QueueConfig(**fields)
    except ValidationError:
        return  # the model's documented error (the CRD and the operator refuse it first)
    queue.configure(config)
    assert queue.config() == config  # every value survives its trip through Redis
    try:
        task_id = queue.enqueue({"n": 1})
    except InvalidPayload:  # a max_payload_bytes below 7 bytes
        assert config.max_payload_bytes < len('{"n":1}')
        return
    broker = make_broker("jobs")
    claimed = broker.claim(1).tasks
    for task in claimed:
        lease = redis_client.hget(queue.keys.task(task.id), "lease_until")
        assert lease is not None and int(lease) > 0  # an integer, never '1e+14'
        broker.complete_many([(task.id, task.token, None)])
    queue.sweep()
    assert queue.get(task_id) is not None or claimed  # pruned only once done
    queue.stats()
    queue.purge()


# -- through a real worker ----------------------------------------------------------------


@FUZZ
@given(
    items=st.lists(enqueue_kwargs(short=True), max_size=3),
    valid=enqueue_kwargs(short=True, valid=True),
)
def test_every_accepted_task_ends_done_or_dead_through_a_real_worker(
    world: FuzzWorld, items: list[dict[str, Any]], valid: dict[str, Any]
) -> None:
    finishing: list[str] = []
    for kwargs in [*items, valid]:
        task_id = enqueue_or_refuse(world.queue, dict(kwargs))
        if task_id is None:
            continue
        assert_readable(world.queue, world.url, task_id)
        task = world.queue.get(task_id)
        assert task is not None
        if task.state is TaskState.DELAYED and _accepted_delay(kwargs) > SHORT_DELAY_S:
            continue  # delayed on purpose, maybe for a century: readable is all we ask
        finishing.append(task_id)
    if finishing:
        finished = world.queue.wait(finishing, timeout=FINISH_S)
        for task_id, task in finished.items():
            assert task.state in (TaskState.DONE, TaskState.DEAD)
            assert task.state is TaskState.DONE or task.reason, task
            assert_readable(world.queue, world.url, task_id)
    assert world.worker.alive(), world.worker.log_text()[-3000:]


def test_the_worker_survived_every_fuzzed_task_and_no_script_call_was_slow(
    world: FuzzWorld,
) -> None:
    world.queue.enqueue({"last": True}, task_id="fuzz-last")
    assert world.queue.wait(["fuzz-last"], timeout=FINISH_S)["fuzz-last"].state is TaskState.DONE
    assert world.worker.alive(), world.worker.log_text()[-3000:]
    world.worker.signal(signal.SIGTERM)
    code = world.worker.wait(30)
    log = world.worker.log_text()
    assert code == 0, log[-3000:]
    assert not world.worker.has_event("worker_failed"), log[-3000:]
    slow = [
        (entry["duration"], entry["command"])
        for entry in world.client.slowlog_get(1000)
        if entry["duration"] > SLOW_SCRIPT_US
    ]
    assert not slow, f"script calls slower than {SLOW_SCRIPT_US} µs: {slow}"


# -- hostile exceptions and results through the real worker's outcome path ----------------

#: With one attempt, every hostile task ends at its first outcome: done or dead.
BREAKER_QUEUES = {"fuzz-sync": "sync_breaker", "fuzz-async": "async_breaker"}
TERMINAL = ("task_done", "task_failed", "task_cancelled")
_method_raises = st.sampled_from(sorted(breaking.RAISES))
#: RetryAfter's valid delays are left out: a deferral is no outcome yet (20 of them per task)
_bad_delays = st.sampled_from(sorted(set(breaking.DELAYS) - {"zero"}))
_messages = st.one_of(
    st.sampled_from(["", "\x1b[2J\x07", "\u202eevil", "x" * 5000, "line\nbreak"]),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=40),
)


@st.composite
def hostile_exceptions(draw: st.DrawFn) -> dict[str, Any]:
    """An exception recipe (``tests.workers.breaking.build_exception``): any base class,
    any of its methods raising anything, a RetryAfter without a usable delay."""
    recipe: dict[str, Any] = {"base": draw(st.sampled_from(sorted(breaking.BASES)))}
    for dunder in ("str", "repr", "class", "args", "traceback"):
        if draw(st.booleans()):
            recipe[dunder] = draw(_method_raises)
    for flag in ("skip_init", "str_subclass", "surrogate"):
        if draw(st.booleans()):
            recipe[flag] = True
    recipe["message"] = draw(_messages)
    recipe["name"] = draw(st.sampled_from(["Hostile", "E\x1b[31m", "Ünïcode", "_"]))
    if (recipe["base"] == "RetryAfter" and not recipe.get("skip_init")) or draw(st.booleans()):
        recipe["delay"] = draw(_bad_delays)
    return recipe


hostile_results = st.one_of(
    st.fixed_dictionaries(
        {"kind": st.sampled_from(["object", "nan", "dict", "float", "circular", "surrogate"])},
        optional={"raises": _method_raises},
    ),
    st.fixed_dictionaries({"kind": st.just("deep"), "depth": st.integers(500, 50_000)}),
    st.fixed_dictionaries({"kind": st.just("text"), "size": st.integers(0, 100_000)}),
    # within the number rule: the value travels in the payload, which refuses more
    st.fixed_dictionaries({"value": st.one_of(st.none(), SAFE_INTEGERS, st.text(max_size=20))}),
)
hostile_payloads = st.one_of(
    st.builds(lambda r: {"raise": r}, hostile_exceptions()),
    st.builds(lambda r: {"return": r}, hostile_results),
    st.builds(lambda r: {"cancel_self": True, "return": r}, hostile_results),
)


@dataclass
class Breakers:
    server: RedisServer
    queues: dict[str, Queue]
    workers: dict[str, WorkerProcess]


@pytest.fixture(scope="module")
def breakers(world: FuzzWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Breakers]:
    """A worker with one slot and no prefetch per queue, sync and async handler, on the
    module's server: a run that kept its slot would stall every later example."""
    base = tmp_path_factory.mktemp("breakers")
    queues, workers = {}, {}
    for name, handler in BREAKER_QUEUES.items():
        queues[name] = Queue(name, client=world.client)
        queues[name].configure(QueueConfig(max_attempts=1))
        workers[name] = WorkerProcess(
            redis_url=world.url,
            queue=name,
            handler=f"tests.workers.breaking:{handler}",
            workdir=base,
            pod=name,
            # debug: a task done is a line of its own (task_done), counted with the failures
            args=[*FAST, "--concurrency", "1", "--prefetch", "0", "--log-level", "debug"],
        ).start()
    try:
        yield Breakers(world.server, queues, workers)
    finally:
        for worker in workers.values():
            worker.kill()


@FUZZ
@given(payloads=st.lists(hostile_payloads, min_size=1, max_size=3))
def test_whatever_a_handler_raises_or_returns_its_task_ends_once_and_the_slot_frees(
    breakers: Breakers, payloads: list[dict[str, Any]]
) -> None:
    for name, queue in breakers.queues.items():
        ids = [queue.enqueue(payload) for payload in payloads]
        sentinel = queue.enqueue({"return": {"value": "after"}})
        worker = breakers.workers[name]
        ended = queue.wait([*ids, sentinel], timeout=FINISH_S)
        for task_id in ids:
            task = ended[task_id]
            assert task.state in (TaskState.DONE, TaskState.DEAD), task
            assert task.state is TaskState.DONE or task.reason, task
            event(f"{name}: {task.state.value} {task.reason or ''}")
        assert ended[sentinel].result == "after"  # one slot: nothing before it kept it
        # the log line follows the write the wait saw: wait for it, then count
        counts = wait_for(
            functools.partial(_terminal_counts, worker, [*ids, sentinel]),
            timeout=FINISH_S,
            what="each task's outcome in the worker's log",
        )
        assert all(n == 1 for n in counts.values()), counts
        assert worker.alive(), worker.log_text()[-3000:]
        assert "Traceback" not in worker.log_text()


def _terminal_counts(worker: WorkerProcess, task_ids: list[str]) -> dict[str, int] | None:
    """How many outcome lines the worker logged per task, once each has at least one."""
    counts = dict.fromkeys(task_ids, 0)
    for line in worker.events():
        if line.get("event") in TERMINAL and line.get("task") in counts:
            counts[line["task"]] += 1
    return counts if all(counts.values()) else None
