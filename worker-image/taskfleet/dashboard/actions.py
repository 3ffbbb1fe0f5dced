"""The dashboard's actions: retry dead tasks, cancel, promote delayed ones, purge finished
ones; all through the queue's own atomic calls (``Queue.retry``, ``cancel_many``,
``promote_many``, ``purge_tasks``), never a write of the dashboard's own. A provider
quota's pause and resume are its own script's calls (``Quota.pause`` / ``resume``).

An action is a form posted twice: first without ``confirm`` (the dashboard shows what it
is about to do and asks), then with it (it does it and says what happened to each task).
Tasks named one by one are changed one call each, so the answer says which were changed
and which were not (a retry of a task no longer dead, a purge of one already gone);
"every" task of a state is one filter call of the queue (in atomic steps of 1000), which
answers with a count.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from taskfleet.producer.queue import Queue
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.control_ops import CancelOutcome
from taskfleet.protocol.groups import group_problem
from taskfleet.protocol.provider_quota import ProviderQuotaOps
from taskfleet.protocol.scripts import SyncScripts
from taskfleet.protocol.states import FINISHED, TaskState

log = logging.getLogger("taskfleet.dashboard")

#: Ids one action may name (a page holds at most 1000 rows).
MAX_IDS = 1000

#: The states each action applies to.
APPLIES = {
    "retry": frozenset({TaskState.DEAD.value}),
    "cancel": frozenset(
        {TaskState.PENDING.value, TaskState.DELAYED.value, TaskState.RUNNING.value}
    ),
    "promote": frozenset({TaskState.DELAYED.value}),
    "purge": frozenset(s.value for s in FINISHED),
}

#: What a cancel did, in words (``CancelOutcome``).
CANCELLED_AS = {
    CancelOutcome.CANCELLED: "cancelled: it will never run",
    CancelOutcome.REQUESTED: "cancel requested: its worker stops the run at its next heartbeat",
    CancelOutcome.DONE: "already done: left as it was",
    CancelOutcome.DEAD: "already dead: left as it was",
    CancelOutcome.FINISHED: "already cancelled",
    CancelOutcome.NOT_FOUND: "not found",
}


class BadActionError(ValueError):
    """A form no action can come from (a 400 page, one line)."""


@dataclass(frozen=True)
class Action:
    kind: str
    #: the state the tasks are in (what ``every`` and a purge cover)
    state: str
    ids: tuple[str, ...] = ()
    every: bool = False

    def describe(self) -> str:
        verb = self.kind.capitalize()
        if self.every:
            return f"{verb} every {self.state} task"
        noun = "task" if len(self.ids) == 1 else "tasks"
        return f"{verb} {len(self.ids)} {self.state} {noun}"


def parse(form: Mapping[str, str], ids: Sequence[str]) -> Action:
    """The action a form asks for: ``action``, ``state``, ``every=1`` or ``id`` fields."""
    kind = form.get("action", "")
    if kind not in APPLIES:
        raise BadActionError(f"no action {kind!r}: one of {', '.join(APPLIES)}")
    state = form.get("state", "")
    if state not in APPLIES[kind]:
        raise BadActionError(
            f"{kind} applies to {', '.join(sorted(APPLIES[kind]))} tasks, not {state!r}"
        )
    every = form.get("every") == "1"
    chosen = tuple(dict.fromkeys(i for i in ids if i))
    if every and chosen:
        raise BadActionError("an action names tasks or says every one, not both")
    if every and kind in ("cancel", "promote"):
        raise BadActionError(f"{kind} names its tasks")
    if not every and not chosen:
        raise BadActionError("no task selected")
    if len(chosen) > MAX_IDS:
        raise BadActionError(f"at most {MAX_IDS} tasks per action, not {len(chosen)}")
    return Action(kind, state, chosen, every)


@dataclass(frozen=True)
class Result:
    summary: str
    #: (task id, what happened to it), for tasks named one by one
    rows: list[tuple[str, str]]
    #: how many tasks the action changed
    changed: int


def run(queue: Queue, action: Action) -> Result:
    if action.kind == "cancel":
        outcomes = queue.cancel_many(list(action.ids))
        rows = [(i, CANCELLED_AS[outcomes[i]]) for i in action.ids]
        changed = sum(
            o in (CancelOutcome.CANCELLED, CancelOutcome.REQUESTED) for o in outcomes.values()
        )
        return Result(f"{changed} of {len(rows)} cancelled or asked to cancel", rows, changed)
    if action.kind == "promote":
        promoted = queue.promote_many(list(action.ids))
        rows = [
            (i, "promoted: pending now" if promoted[i] else "not delayed any more: left as it was")
            for i in action.ids
        ]
        changed = sum(promoted.values())
        return Result(f"{changed} of {len(rows)} promoted to pending", rows, changed)
    if action.kind == "retry":
        if action.every:
            n = queue.retry()
            return Result(f"{n} dead tasks sent back to pending", [], n)
        return _one_by_one(
            action,
            lambda i: queue.retry([i]),
            "sent back to pending",
            "not dead any more: left as it was",
        )
    if action.every:
        n = queue.purge_tasks(action.state)
        return Result(f"{n} {action.state} tasks deleted", [], n)
    return _one_by_one(
        action,
        lambda i: queue.purge_tasks(action.state, [i]),
        "deleted",
        f"not {action.state} (gone or changed meanwhile): left as it was",
    )


def _one_by_one(action: Action, call: Callable[[str], int], done: str, skipped: str) -> Result:
    rows = [(i, done if call(i) else skipped) for i in action.ids]
    changed = sum(1 for _, what in rows if what == done)
    return Result(f"{changed} of {len(rows)} {done}", rows, changed)


def record(client: str, queue: str, action: Action, outcome: Result | str) -> None:
    """One structured line per action (and per refusal): who, what, which tasks, result."""
    fields = {
        "client": client,
        "queue": queue,
        "action": action.kind,
        "state": action.state,
        "tasks": "every" if action.every else ",".join(action.ids),
        "result": outcome if isinstance(outcome, str) else outcome.summary,
    }
    if isinstance(outcome, Result):
        fields["changed"] = str(outcome.changed)
    log.info("dashboard_action", extra={"fields": fields})


#: The longest claim pause the dashboard sets (a week), and a reason's length.
MAX_PAUSE_S = 7 * 86400
MAX_REASON = 200


@dataclass(frozen=True)
class ClaimAction:
    """Pause or resume the queue's claims (``Queue.pause_claims`` / ``resume_claims``),
    or one group's."""

    kind: str
    group: str | None = None
    seconds: float = 0.0
    reason: str = ""

    def describe(self) -> str:
        what = f"group {self.group}'s claims" if self.group else "the queue's claims"
        if self.kind == "resume":
            return f"Resume {what}"
        return f"Pause {what} for {self.seconds:g} s"


def parse_claims(form: Mapping[str, str]) -> ClaimAction:
    """``op`` (pause or resume), ``group`` (optional), ``seconds`` and ``reason`` (pause)."""
    kind = form.get("op", "")
    if kind not in ("pause", "resume"):
        raise BadActionError(f"no claims action {kind!r}: pause or resume")
    group = form.get("group", "").strip() or None
    if group is not None and (problem := group_problem(group)):
        raise BadActionError(problem)
    if kind == "resume":
        return ClaimAction(kind, group)
    raw = form.get("seconds", "").strip()
    try:
        seconds = float(raw)
    except ValueError:
        raise BadActionError(f"seconds must be a number of seconds, not {raw[:40]!r}") from None
    if not 1 <= seconds <= MAX_PAUSE_S:
        raise BadActionError(f"seconds must be 1..{MAX_PAUSE_S}, not {raw[:40]!r}")
    reason = form.get("reason", "").strip()
    if len(reason) > MAX_REASON:
        raise BadActionError(f"a reason holds at most {MAX_REASON} characters")
    return ClaimAction(kind, group, seconds, reason or "paused from the dashboard")


def run_claims(queue: Queue, action: ClaimAction) -> str:
    if action.kind == "resume":
        queue.resume_claims(group=action.group)
        return "resumed"
    until = queue.pause_claims(action.seconds, reason=action.reason, group=action.group)
    return f"paused until {until}"


def record_claims(client: str, queue: str, action: ClaimAction, outcome: str) -> None:
    """One structured line per claims action (and refusal), as ``record``."""
    fields = {
        "client": client,
        "queue": queue,
        "action": f"{action.kind}_claims",
        "group": action.group or "",
        "seconds": f"{action.seconds:g}",
        "reason": action.reason,
        "result": outcome,
    }
    log.info("dashboard_action", extra={"fields": fields})


#: What the schedules page does to one schedule.
SCHEDULE_OPS = ("pause", "resume", "run")


@dataclass(frozen=True)
class ScheduleAction:
    op: str
    name: str


def parse_schedule(form: Mapping[str, str]) -> ScheduleAction:
    op, name = form.get("op", ""), form.get("name", "")
    if op not in SCHEDULE_OPS:
        raise BadActionError(f"no schedule action {op!r}: one of {', '.join(SCHEDULE_OPS)}")
    if not name or len(name) > 200:
        raise BadActionError("name the schedule (1..200 characters)")
    return ScheduleAction(op, name)


def run_schedule(queue: Queue, action: ScheduleAction) -> str:
    """Pause or resume through the queue's calls; run now enqueues one task as the
    schedule's next slot would (its payload, priority, attempts, cost, timeout, group),
    outside its slots: the schedule's own record is left as it is."""
    from taskfleet.protocol.errors import InvalidArgument, ScheduleNotFound

    try:
        if action.op == "pause":
            return "paused" if queue.pause_schedule(action.name) else "already paused"
        if action.op == "resume":
            return "resumed" if queue.resume_schedule(action.name) else "already active"
        found = queue.get_schedule(action.name)
        if found is None:
            raise BadActionError(f"no schedule {action.name!r}")
        task_id = queue.enqueue(
            found.payload,
            priority=found.priority,
            max_attempts=found.max_attempts,
            cost=found.cost,
            timeout=found.timeout_s,
            deadline=found.deadline_s,
            group=found.group,
        )
    except (ScheduleNotFound, InvalidArgument) as exc:
        raise BadActionError(str(exc)) from None
    return f"enqueued {task_id}"


def record_schedule(client: str, queue: str, action: ScheduleAction, outcome: str) -> None:
    fields = {
        "client": client,
        "queue": queue,
        "action": f"schedule_{action.op}",
        "schedule": action.name,
        "result": outcome,
    }
    log.info("dashboard_action", extra={"fields": fields})


@dataclass(frozen=True)
class QuotaAction:
    """Pause or resume a provider quota (every queue that names it)."""

    op: str
    name: str
    seconds: float = 0.0
    reason: str = ""


def parse_quota(form: Mapping[str, str]) -> QuotaAction:
    """``op`` (pause or resume), ``name``, and for a pause ``seconds`` and ``reason``."""
    from taskfleet.protocol.keys import validate_quota_name

    op = form.get("op", "")
    if op not in ("pause", "resume"):
        raise BadActionError(f"no quota action {op!r}: pause or resume")
    try:
        name = validate_quota_name(form.get("name", ""))
    except ValueError as exc:
        raise BadActionError(str(exc)) from None
    if op == "resume":
        return QuotaAction(op, name)
    raw = form.get("seconds", "").strip()
    try:
        seconds = float(raw)
    except ValueError:
        raise BadActionError(f"seconds must be a number of seconds, not {raw[:40]!r}") from None
    if not 1 <= seconds <= MAX_PAUSE_S:
        raise BadActionError(f"seconds must be 1..{MAX_PAUSE_S}, not {raw[:40]!r}")
    reason = form.get("reason", "").strip()
    if len(reason) > MAX_REASON:
        raise BadActionError(f"a reason holds at most {MAX_REASON} characters")
    return QuotaAction(op, name, seconds, reason or "paused from the dashboard")


def run_quota(client: SyncClient, action: QuotaAction) -> str:
    """The quota's own script (``Quota.pause`` / ``resume``'s call) on the dashboard's client."""
    ops = ProviderQuotaOps(action.name)
    if action.op == "resume":
        op = ops.resume()
    else:
        op = ops.pause(math.ceil(action.seconds * 1000), action.reason)
    use = SyncScripts.for_client(client).run(op)
    if use is None:
        raise BadActionError(f"no provider quota {action.name!r}")
    return "resumed" if action.op == "resume" else f"paused until {use.paused_until_ms}"


def record_quota(client: str, action: QuotaAction, outcome: str) -> None:
    fields = {
        "client": client,
        "action": f"quota_{action.op}",
        "quota": action.name,
        "seconds": f"{action.seconds:g}",
        "reason": action.reason,
        "result": outcome,
    }
    log.info("dashboard_action", extra={"fields": fields})
