"""Claim records read into tasks, without Redis: every shape a stored task can take ends as
a task to run, a task to fail for good (and why), or a dropped record; never a crash."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from taskfleet.producer.queue import Queue
from taskfleet.protocol.claimrecord import CLAIM_MARK
from taskfleet.worker.claimed import ClaimedTask, parse_claim_records


def record(
    task_id: bytes = b"t1",
    token: bytes = b"tok",
    *,
    attempts: bytes = b"1",
    max_attempts: bytes = b"3",
    timeout: bytes = b"",
    lost: bytes = b"0",
    priority: bytes = b"0",
    cost: bytes = b"1",
    waited: bytes = b"",
    payload: bytes = b"{}",
) -> bytes:
    fields = (task_id, token, attempts, max_attempts, timeout, lost, priority, cost, waited)
    return b"\0".join((*fields, payload))


def tagged(*pairs: tuple[bytes, bytes], payload: bytes = b"{}") -> bytes:
    """A claim record in the tagged form: the mark, name, value pairs, an empty name, the
    payload."""
    return b"\0".join((CLAIM_MARK, *(part for pair in pairs for part in pair), b"", payload))


REQUIRED = (
    (b"id", b"t1"),
    (b"token", b"tok"),
    (b"attempts", b"1"),
    (b"max_attempts", b"3"),
    (b"lost", b"0"),
    (b"priority", b"0"),
    (b"cost", b"1"),
)


def test_a_tagged_record_carries_everything_a_run_reads() -> None:
    raw = tagged(
        (b"id", b"job-7"),
        (b"token", b"abc"),
        (b"attempts", b"2"),
        (b"max_attempts", b"5"),
        (b"lost", b"1"),
        (b"priority", b"-3"),
        (b"cost", b"4"),
        (b"timeout", b"1.5"),
        (b"waited_ms", b"250"),
        (b"deadline", b"1700000000000"),
        (b"group", b"tenant-a"),
        (b"trace", b'{"traceparent":"00-ab-cd-01"}'),
        (b"after", b'["a","b"]'),
        payload=b'\x01resize\x01{"n": [1, 2]}',
    )
    [task], bad = parse_claim_records([raw])
    assert bad == []
    assert task == ClaimedTask(
        "job-7",
        "abc",
        {"n": [1, 2]},
        2,
        5,
        1.5,
        1,
        -3,
        4,
        0.25,
        trace=b'{"traceparent":"00-ab-cd-01"}',
        name="resize",
        group="tenant-a",
        after='["a","b"]',
        deadline_ms=1_700_000_000_000,
    )


def test_a_tagged_record_reads_in_any_order_and_ignores_the_names_it_does_not_know() -> None:
    raw = tagged((b"colour", b"blue"), *reversed(REQUIRED), (b"x-later", b"1"))
    [task], bad = parse_claim_records([raw])
    assert (task.id, task.token, task.attempts, task.max_attempts, task.cost) == (
        "t1",
        "tok",
        1,
        3,
        1,
    )
    assert bad == []


def test_a_tagged_record_without_the_optional_fields_says_the_task_has_none() -> None:
    [task], _ = parse_claim_records([tagged(*REQUIRED)])
    assert (task.timeout, task.waited, task.group, task.trace, task.deadline_ms) == (
        None,
        None,
        None,
        None,
        None,
    )
    assert task.after == ""  # known to have waited for nothing: no read to make


def test_a_tagged_payload_is_the_whole_rest_nul_bytes_and_all() -> None:
    tasks, bad = parse_claim_records([tagged(*REQUIRED, payload=b'{"a": "x\0\0y"}')])
    assert tasks == []
    [(task_id, token, message, reason)] = bad
    assert (task_id, token, reason) == ("t1", "tok", "bad payload")
    assert "control character" in message  # the NULs reached the decoder: the payload's


def test_a_tagged_record_with_a_field_that_cannot_be_read_makes_a_bad_task_naming_it() -> None:
    raw = tagged(*(pair if pair[0] != b"cost" else (b"cost", b"x") for pair in REQUIRED))
    assert parse_claim_records([raw]) == (
        [],
        [("t1", "tok", "task unreadable: cost b'x' is not an integer", "bad task")],
    )


def test_a_tagged_record_without_an_id_or_a_token_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="taskfleet.worker"):
        tasks, bad = parse_claim_records([tagged(*REQUIRED[1:]), tagged(*REQUIRED)])
    assert [task.id for task in tasks] == ["t1"]
    assert bad == []
    assert [r.getMessage() for r in caplog.records] == ["claim_record_dropped"]


def test_a_record_becomes_the_task_it_names_with_every_field_read() -> None:
    # id, token, attempts, max_attempts, timeout_s, lost, priority, cost, waited_ms, payload
    fields = [b"job-7", b"abc", b"2", b"5", b"1.5", b"1", b"-3", b"4", b"250", b'{"n": [1, 2]}']
    raw = b"\0".join(fields)
    tasks, bad = parse_claim_records([raw])
    assert tasks == [
        ClaimedTask("job-7", "abc", {"n": [1, 2]}, 2, 5, 1.5, 1, -3, 4, 0.25, unread=True)
    ]
    assert bad == []


def test_a_record_of_an_older_producer_without_its_wait_reads_with_the_wait_unknown() -> None:
    fields = [b"job-7", b"abc", b"2", b"5", b"", b"1", b"-3", b"4", b'{"n": 1}']
    tasks, bad = parse_claim_records([b"\0".join(fields)])
    assert tasks == [ClaimedTask("job-7", "abc", {"n": 1}, 2, 5, None, 1, -3, 4, None, unread=True)]
    assert bad == []


@pytest.mark.parametrize("waited", [b"", b"x", b"-5", b"nan", b"inf"])
def test_a_wait_that_is_absent_or_unreadable_is_unknown_and_never_refuses_the_task(
    waited: bytes,
) -> None:
    tasks, bad = parse_claim_records([record(waited=waited)])
    assert [task.waited for task in tasks] == [None]
    assert bad == []


def test_an_empty_timeout_means_no_limit_and_text_records_read_like_bytes() -> None:
    tasks, _ = parse_claim_records([record().decode()])
    assert tasks[0].timeout is None
    assert tasks[0].payload == {}


def test_tasks_come_back_in_record_order_with_the_unrunnable_ones_set_apart() -> None:
    records = [record(b"a"), record(b"b", payload=b"[]"), record(b"c"), record(b"d", cost=b"x")]
    tasks, bad = parse_claim_records(records)
    assert [task.id for task in tasks] == ["a", "c"]
    assert [(task_id, reason) for task_id, _, _, reason in bad] == [
        ("b", "bad payload"),
        ("d", "bad task"),
    ]


@pytest.mark.parametrize(
    ("field", "stored", "read"),
    [
        ("attempts", b"3.0", 3),
        ("priority", b"-2", -2),
        ("cost", b"1e+14", 10**14),
    ],
)
def test_whole_numbers_a_foreign_writer_stored_as_floats_are_read(
    field: str, stored: bytes, read: int
) -> None:
    tasks, bad = parse_claim_records([record(**{field: stored})])
    assert bad == []
    assert getattr(tasks[0], field) == read


@pytest.mark.parametrize(
    ("field", "stored", "error"),
    [
        ("attempts", b"two", "attempts b'two' is not an integer"),
        ("max_attempts", b"2.5", "max_attempts b'2.5' is not an integer"),
        ("lost", b"nan", "lost b'nan' is not an integer"),
        ("priority", b"inf", "priority b'inf' is not an integer"),
        ("cost", b"", "cost b'' is not an integer"),
        ("timeout", b"0", "timeout b'0' is not a positive number of seconds"),
        ("timeout", b"-inf", "timeout b'-inf' is not a positive number of seconds"),
        ("timeout", b"soon", "timeout b'soon' is not a positive number of seconds"),
    ],
)
def test_a_field_that_cannot_be_read_makes_a_bad_task_naming_it(
    field: str, stored: bytes, error: str
) -> None:
    tasks, bad = parse_claim_records([record(b"t1", b"tok", **{field: stored})])
    assert tasks == []
    assert bad == [("t1", "tok", f"task unreadable: {error}", "bad task")]


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"[1, 2]", "payload is not a JSON object"),
        (b'"text"', "payload is not a JSON object"),
        (b"{not json", "payload is not valid JSON: "),
        (b'{"a":' + b"[" * 200_000 + b"]" * 200_000 + b"}", "payload is not valid JSON: "),
    ],
    ids=["list", "string", "broken", "nested-too-deep"],
)
def test_a_payload_that_is_not_a_json_object_makes_a_bad_payload(
    payload: bytes, error: str
) -> None:
    tasks, bad = parse_claim_records([record(payload=payload)])
    assert tasks == []
    [(task_id, token, message, reason)] = bad
    assert (task_id, token, reason) == ("t1", "tok", "bad payload")
    assert message.startswith(error)


def test_a_nul_byte_inside_a_payload_stays_in_the_payload_and_fields_keep_their_place() -> None:
    tasks, bad = parse_claim_records([record(b"t1", b"tok", payload=b'{"a": "x\0y"}')])
    assert tasks == []
    [(task_id, token, message, reason)] = bad
    assert (task_id, token, reason) == ("t1", "tok", "bad payload")
    assert "control character" in message  # JSON refuses it raw; escaped it is fine


@pytest.mark.parametrize(
    "raw",
    [
        b"t1\0tok\0" + b"1\0" * 5,  # two fields short of a record without its wait
        b"just-an-id",
        b"",
        record(task_id=b"\xff\xfe"),  # an id that is not UTF-8
        record(token=b"\xc3"),
    ],
    ids=["short", "no-fields", "empty", "id-not-utf8", "token-not-utf8"],
)
def test_a_record_that_names_no_task_is_dropped_with_a_log_line(
    raw: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="taskfleet.worker"):
        tasks, bad = parse_claim_records([raw, record(b"next")])
    assert [task.id for task in tasks] == ["next"]
    assert bad == []
    [line] = [r for r in caplog.records if r.getMessage() == "claim_record_dropped"]
    assert line.__dict__["fields"]["record"] == repr(raw[:200])


def test_a_hand_off_to_a_worker_that_reads_tagged_records_carries_its_group_and_wait(
    queue: Queue, make_broker: Callable[..., Any]
) -> None:
    """The worker record written at register says which claim record form it reads: a
    producer's hand-off to a worker of this release is tagged, with all a run reads."""
    broker = make_broker(queue.name, pod="pod-a")
    broker.register(2)
    assert broker.claim(2, idle_ms=30_000).tasks == []  # empty: registered for hand-offs
    task_id = queue.enqueue({"handed": "over"}, group="tenant-a")

    [raw] = queue.client.lrange(queue.keys.wake("pod-a"), 0, -1)

    assert raw.startswith(CLAIM_MARK + b"\0")
    [handed] = broker.wait_for_work(1.0).tasks
    assert (handed.id, handed.group, handed.payload) == (task_id, "tenant-a", {"handed": "over"})
    assert handed.waited is not None and handed.waited >= 0


def test_a_hand_off_to_a_worker_whose_record_names_no_claim_record_keeps_the_older_form(
    queue: Queue, make_broker: Callable[..., Any]
) -> None:
    """A 0.2 worker's record has no ``claim_record``: a producer hands it a task in the
    nine-field form it reads (the payload last), which this release reads too."""
    broker = make_broker(queue.name, pod="pod-a")
    broker.register(2)
    record = json.loads(queue.client.hget(queue.keys.workers, "pod-a"))
    del record["claim_record"]  # as a worker of 0.2 writes it
    queue.client.hset(queue.keys.workers, "pod-a", json.dumps(record))
    assert broker.claim(2, idle_ms=30_000).tasks == []
    task_id = queue.enqueue({"handed": "over", "nul": "a\u0000b"})

    [raw] = queue.client.lrange(queue.keys.wake("pod-a"), 0, -1)

    older = raw.split(b"\0", 8)  # the reader before waited_ms: the payload is the 9th field
    assert older[0].decode() == task_id
    assert json.loads(older[8]) == {"handed": "over", "nul": "a\u0000b"}
    [handed] = broker.wait_for_work(1.0).tasks  # today's reader takes it too
    assert handed.id == task_id and handed.waited is None and handed.after is None


def test_an_older_producers_hand_off_of_a_grouped_traced_task_runs_with_its_group_and_trace(
    queue: Queue, make_broker: Callable[..., Any]
) -> None:
    """A 0.2 producer hands an idle worker a task in the positional form, which names no
    group and no trace: the worker reads both from the task hash, in one round trip."""
    broker = make_broker(queue.name, pod="pod-a")
    broker.register(2)
    record = json.loads(queue.client.hget(queue.keys.workers, "pod-a"))
    del record["claim_record"]  # the producer writes the positional form, as 0.2 does
    queue.client.hset(queue.keys.workers, "pod-a", json.dumps(record))
    assert broker.claim(2, idle_ms=30_000).tasks == []
    task_id = queue.enqueue({"handed": "over"}, group="tenant-a")
    carrier = b'{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
    queue.client.hset(queue.keys.task(task_id), "trace", carrier)  # as its producer stored it
    [raw] = queue.client.lrange(queue.keys.wake("pod-a"), 0, -1)
    assert not raw.startswith(CLAIM_MARK)

    [handed] = broker.wait_for_work(1.0).tasks

    assert (handed.id, handed.group, handed.trace) == (task_id, "tenant-a", carrier)
    assert not handed.unread
