"""What an enqueue takes, validated and encoded for the enqueue script (no Redis here).

``enqueue_args`` turns one task (an ``EnqueueSpec`` or a dict of ``Queue.enqueue``'s
arguments) into the script's ``EnqueueArgs`` (``encode_task``: the same from keyword
arguments, what a single enqueue calls), every number checked against
``taskfleet.protocol.bounds``; ``encode_payload`` gives a payload's one JSON text.
"""

from __future__ import annotations

import json
import math
import os
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from taskfleet.protocol import bounds
from taskfleet.protocol.bounds import PRIORITY_MAX, PRIORITY_MIN
from taskfleet.protocol.errors import InvalidArgument, InvalidPayload
from taskfleet.protocol.groups import check_group
from taskfleet.protocol.jsondepth import nested_too_deep
from taskfleet.protocol.numbers import NON_FINITE_ERROR, number_problem, value_problem
from taskfleet.protocol.provider_quota import quotas_json
from taskfleet.protocol.queue_ops import EnqueueArgs
from taskfleet.protocol.tasknames import named_payload, task_name_problem


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What ``Queue.enqueue_result`` did: ``created`` is False when the same task (same
    id, payload and options) existed already and nothing changed."""

    task_id: str
    created: bool


#: Fresh random hex, 32 digits (128 bits) an item: ``random_hex`` takes one, and draws
#: ``RANDOM_BATCH`` at a time from the OS (one system call, not one per id and token). A
#: deque: threads each take their own item without a lock; a forked child starts empty
#: (it must not draw its parent's ids).
_RANDOM: deque[str] = deque()
RANDOM_BATCH = 128
os.register_at_fork(after_in_child=_RANDOM.clear)


def random_hex() -> str:
    """32 hex digits of the OS's randomness, never handed out twice (a fork's child draws
    its own)."""
    try:
        return _RANDOM.popleft()
    except IndexError:
        data = os.urandom(16 * RANDOM_BATCH).hex()
        _RANDOM.extend([data[i : i + 32] for i in range(32, len(data), 32)])
        return data[:32]


def token_base() -> str:
    """Claim tokens for tasks an enqueue hands straight to idle workers (unique per call):
    64 random bits, 16 hex digits."""
    return random_hex()[:16]


class EnqueueSpec(BaseModel):
    """One task for ``enqueue_many`` or a flow, as a value: ``encode_task``'s arguments
    (``enqueue``'s), which a test keeps equal to these fields."""

    model_config = ConfigDict(frozen=True)

    payload: dict[str, Any]
    priority: int = 0
    delay: float | timedelta | None = None
    deadline: float | timedelta | datetime | None = None
    max_attempts: int | None = None
    task_id: str | None = None
    cost: int = 1
    timeout: float | timedelta | None = None
    task: str | None = None
    after: list[str] | None = None
    on_dep_fail: str | None = None
    group: str | None = None
    quotas: dict[str, dict[str, int]] | None = None


#: What a task waiting on others (``after``) does when one of them ends dead or cancelled.
DEP_POLICIES = ("fail", "ignore", "cancel")


# Built once: json.dumps with options builds an encoder per call. Compact, UTF-8 as is
# (ensure_ascii would inflate non-ASCII text up to 6x).
_SORTED = json.JSONEncoder(
    allow_nan=False, ensure_ascii=False, separators=(",", ":"), sort_keys=True
)
_UNSORTED = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


_FIELDS = frozenset(EnqueueSpec.model_fields)


def encode_payload(payload: object) -> str:
    """JSON text of a payload (compact, keys sorted); one clear error for anything else.

    Keys are sorted so that the same object is the same text however its dict was built:
    enqueueing an existing id compares payloads by their text (see ``Queue.enqueue``).
    """
    if not isinstance(payload, dict):
        raise InvalidPayload(f"payload must be a JSON object (dict), not {type(payload).__name__}")
    if not payload:
        return "{}"
    try:
        try:
            text = _SORTED.encode(payload)
        except TypeError:
            # keys of mixed types (e.g. 1 and "a") cannot be sorted; JSON makes them text
            text = _UNSORTED.encode(payload)
        data = text.encode()  # a lone surrogate cannot be sent as UTF-8: refuse it here, clearly
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        # a NaN or an infinity: name where it is (the encoder does not say)
        problem = (
            value_problem(payload, "payload") if str(exc).startswith(NON_FINITE_ERROR) else None
        )
        text = problem or f"payload is not JSON-serialisable: {_short(exc)}"
        raise InvalidPayload(text) from None
    except RecursionError:
        raise InvalidPayload(_TOO_DEEP) from None
    if nested_too_deep(text):
        raise InvalidPayload(_TOO_DEEP)
    problem = number_problem(payload, data, "payload")
    if problem is not None:
        raise InvalidPayload(problem)
    return text


_TOO_DEEP = (
    f"payload is nested more than {bounds.MAX_PAYLOAD_DEPTH} levels of arrays and objects deep"
)


def _short(value: object) -> str:
    """A value or message for an error line: bounded, never failing (a 5000-digit int)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    try:
        shown = str(value)
    except ValueError:
        return type(value).__name__
    return shown if len(shown) <= 200 else shown[:200] + "..."


def _seconds(value: object, what: str, high: float) -> float | None:
    """Seconds as a finite float at most ``high`` (callers check their lower bound)."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds: object = value.total_seconds()
    else:
        seconds = value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgument(f"{what} must be seconds (a finite number) or a timedelta")
    bound = f"{high:.0f} s ({_span(high)})"
    try:
        number = float(seconds)
    except OverflowError:  # an int too large for a float
        if seconds > 0:
            shown = _short(seconds)
            raise InvalidArgument(f"{what} must be at most {bound}, not {shown}") from None
        number = -math.inf
    if not math.isfinite(number):
        raise InvalidArgument(f"{what} must be seconds (a finite number) or a timedelta")
    if number > high:
        raise InvalidArgument(f"{what} must be at most {bound}, not {number:g}")
    return number


def _span(seconds: float) -> str:
    years = seconds / (365 * 24 * 3600)
    return f"{years:g} years" if years >= 1 else f"{seconds / 86400:g} days"


def checked_int(value: object, what: str, low: int, high: int | None = None) -> int:
    """``value`` if an int within ``low`` .. ``high``, else ``InvalidArgument`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an integer, not {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise InvalidArgument(f"{what} must be {bound}, not {_short(value)}")
    return value


def _deadline_ms(value: datetime) -> int:
    """An aware datetime as epoch ms, within 1970 .. now + MAX_DEADLINE_S."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgument("deadline datetime must be timezone-aware")
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    try:
        ahead = (value - datetime.now(UTC)).total_seconds()
        ms = (value - epoch) // timedelta(milliseconds=1)
    except OverflowError:
        ahead, ms = math.inf, -1
    if ahead > bounds.MAX_DEADLINE_S:
        raise InvalidArgument(
            f"deadline must be at most {bounds.MAX_DEADLINE_S} s "
            f"({_span(bounds.MAX_DEADLINE_S)}) from now, not {value.isoformat()}"
        )
    if ms < 0:
        raise InvalidArgument(f"deadline must be after 1970-01-01, not {value.isoformat()}")
    return ms


def enqueue_args(spec: EnqueueSpec | Mapping[str, Any]) -> EnqueueArgs:
    """Validate one task and encode it for the enqueue script.

    Every number is bounded by ``taskfleet.protocol.bounds`` so that each reader (Lua, the
    worker, ``Task``) can represent what is stored; out of range is ``InvalidArgument``
    naming the bound.
    """
    if isinstance(spec, EnqueueSpec):
        fields: Mapping[str, Any] = spec.__dict__
    else:
        if not isinstance(spec, Mapping):
            raise InvalidArgument(f"enqueue item must be a dict or EnqueueSpec, not {spec!r:.100}")
        fields = spec
        unknown = fields.keys() - _FIELDS
        if unknown:
            names = ", ".join(sorted(_short(k) for k in unknown))
            raise InvalidArgument(f"unknown enqueue field(s): {names}")
        if "payload" not in fields:
            raise InvalidArgument("enqueue item needs a 'payload'")
    return encode_task(**fields)


def encode_after(after: object, on_dep_fail: object, task_id: str | None) -> tuple[str, str]:
    """``after`` as the script's JSON array and the policy, checked: ids of tasks (at
    most ``bounds.MAX_AFTER``, none twice, not the task itself), a policy among
    ``DEP_POLICIES``. A policy without ``after`` is the one for the children the task
    adds at run time ('' for after)."""
    if after is None:
        # a policy alone is for the children the task will add at run time (add_children)
        if on_dep_fail is None:
            return "", ""
        return "", _policy(on_dep_fail)
    if isinstance(after, str) or not isinstance(after, list | tuple):
        raise InvalidArgument("after must be a list of task ids")
    if not 1 <= len(after) <= bounds.MAX_AFTER:
        raise InvalidArgument(f"after must name 1 to {bounds.MAX_AFTER} task ids, not {len(after)}")
    ids = [_check_task_id(dep) for dep in after]
    if len(set(ids)) != len(ids):
        raise InvalidArgument("after names a task id twice")
    if task_id is not None and task_id in ids:
        raise InvalidArgument(f"task {task_id!r} cannot wait for itself (after)")
    return _UNSORTED.encode(ids), _policy("fail" if on_dep_fail is None else on_dep_fail)


def _policy(on_dep_fail: object) -> str:
    if on_dep_fail not in DEP_POLICIES:
        raise InvalidArgument(
            f"on_dep_fail must be one of {', '.join(DEP_POLICIES)}, not {_short(on_dep_fail)}"
        )
    return str(on_dep_fail)


def encode_task(
    payload: dict[str, Any],
    *,
    priority: int = 0,
    delay: float | timedelta | None = None,
    deadline: float | timedelta | datetime | None = None,
    max_attempts: int | None = None,
    task_id: str | None = None,
    cost: int = 1,
    timeout: float | timedelta | None = None,
    task: str | None = None,
    after: list[str] | None = None,
    on_dep_fail: str | None = None,
    group: str | None = None,
    quotas: Mapping[str, Mapping[str, int]] | None = None,
) -> EnqueueArgs:
    """One task, checked and encoded: these are ``Queue.enqueue``'s arguments, written
    here once (the enqueue calls of both APIs take them from this signature, and
    ``EnqueueSpec`` holds the same fields as a value)."""
    text = encode_payload(payload)
    if priority.__class__ is not int or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        priority = checked_int(priority, "priority", PRIORITY_MIN, PRIORITY_MAX)
    if cost.__class__ is not int or not bounds.MIN_COST <= cost <= bounds.MAX_COST:
        cost = checked_int(cost, "cost", bounds.MIN_COST, bounds.MAX_COST)
    attempts: int | Literal[""] = ""
    if max_attempts is not None:
        checked_int(max_attempts, "max_attempts", bounds.MIN_ATTEMPTS, bounds.MAX_ATTEMPTS)
        attempts = int(max_attempts)
    delay_ms = 0
    if delay is not None:
        seconds = _seconds(delay, "delay", bounds.MAX_DELAY_S) or 0.0
        if seconds < 0:
            raise InvalidArgument(f"delay must be >= 0, not {seconds:g}")
        delay_ms = math.ceil(seconds * 1000)
    timeout_s: float | Literal[""] = ""
    if timeout is not None:
        limit = _seconds(timeout, "timeout", bounds.MAX_TIMEOUT_S) or 0.0
        if limit <= 0:
            raise InvalidArgument(f"timeout must be > 0, not {limit:g}")
        timeout_s = limit
    deadline_text = ""
    if isinstance(deadline, datetime):
        deadline_text = f"@{_deadline_ms(deadline)}"
    elif deadline is not None:
        ahead = _seconds(deadline, "deadline", bounds.MAX_DEADLINE_S)
        if ahead is None or ahead <= 0:
            raise InvalidArgument("deadline must be > 0 seconds from now")
        deadline_text = str(math.ceil(ahead * 1000))
    if task is not None:
        problem = task_name_problem(task)
        if problem:
            raise InvalidArgument(problem)
        text = named_payload(task, text)
    after_text, policy = "", ""
    if after is not None or on_dep_fail is not None:
        if after is not None and delay_ms > 0:
            raise InvalidArgument(
                "after and delay cannot be combined (a waiting task runs once ready)"
            )
        after_text, policy = encode_after(after, on_dep_fail, task_id)
    if group is not None:
        check_group(group)
    return EnqueueArgs(  # by position: a NamedTuple's keywords cost a call of their own
        # 128 random bits (a UUID4 has 122), 32 hex digits as before, without the UUID object
        random_hex() if task_id is None else _check_task_id(task_id),
        text,  # payload
        priority,
        delay_ms,
        deadline_text,
        attempts,  # max_attempts
        cost,
        timeout_s,
        after_text,
        policy,  # on_dep_fail
        group or "",
        "" if quotas is None else quotas_json(quotas),
    )


def batch_args(items: Iterable[EnqueueSpec | Mapping[str, Any]]) -> list[EnqueueArgs]:
    """``enqueue_many``'s tasks, each checked, and no id twice."""
    batch = [enqueue_args(item) for item in items]
    seen: set[str] = set()
    for args in batch:
        if args.task_id in seen:
            raise InvalidArgument(f"task id {args.task_id!r} appears twice in one enqueue")
        seen.add(args.task_id)
    return batch


def _check_task_id(task_id: object) -> str:
    # printable: ids travel NUL-separated in claim replies and show up in logs (a lone
    # surrogate is not printable, so every accepted id is valid UTF-8)
    if (
        not isinstance(task_id, str)
        or not task_id
        or len(task_id) > bounds.MAX_TASK_ID_LEN
        or not task_id.isprintable()
    ):
        raise InvalidArgument(
            f"task_id must be a non-empty printable string of <= {bounds.MAX_TASK_ID_LEN} chars"
        )
    return task_id
