"""Groups within a queue: the group key a task may carry, fair claiming between groups,
and each group's settings and state (no pydantic here: a worker imports it).

A task of a group waits in its group's own pending zset; the claim serves the groups in
turn (weighted round robin, ``lua/includes/group_fair.lua``), so a group with 50,000
pending tasks cannot starve one with five. Per group: a weight (its share of the claims),
a concurrency cap and task and cost rate limits, each the group's own setting
(``group:<g>``, written here at run time) or the queue's default for every group (the
config's ``group_*`` fields).

- ``check_group``: a group name, validated (one line on what to fix);
- ``GroupSettings`` / ``set_group``: one group's own settings, replaced in one transaction;
- ``group_counts``: pending and running tasks per group, in one round trip per step;
- ``group_totals`` / ``group_rows``: what ``top`` and the dashboard show of a queue's
  groups, bounded whatever their number (each group read is named, none is scanned);
- ``lane_heads`` / ``lanes`` / ``fair_order`` / ``lane_ids``: pending across its groups
  in the order the claim serves them (``Queue.list``, ``taskfleet ls``, the dashboard).
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from taskfleet.protocol.bounds import MAX_COUNT
from taskfleet.protocol.calls import Call, Command, one
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.keys import QueueKeys, validate_unit_name
from taskfleet.protocol.records import text, whole

__all__ = [
    "MAX_GROUP_LEN",
    "GroupCount",
    "GroupRow",
    "GroupSettings",
    "GroupTotals",
    "Lane",
    "by_load",
    "check_group",
    "fair_order",
    "group_counts",
    "group_heads",
    "group_problem",
    "group_rows",
    "group_settings",
    "group_size",
    "group_totals",
    "lane_heads",
    "lane_ids",
    "lanes",
    "set_group",
]

MAX_GROUP_LEN = 100
# No braces (a key's hash tag), no whitespace or NUL; '@' for tenants named by e-mail.
_GROUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,99}$")
#: The largest weight a group may have: scores of the ring stay exact doubles.
MAX_WEIGHT = 1000


def group_problem(name: object) -> str | None:
    """What is wrong with a group name, or None."""
    if not isinstance(name, str) or not _GROUP.fullmatch(name):
        shown = repr(name)[:60]
        return (
            f"group must be 1-{MAX_GROUP_LEN} characters of letters, digits, '.', '_', ':', "
            f"'@' or '-', starting with a letter or digit, not {shown}"
        )
    return None


def check_group(name: object) -> str:
    """``name`` if it is a valid group, else ``InvalidArgument`` (one line)."""
    problem = group_problem(name)
    if problem:
        raise InvalidArgument(problem)
    assert isinstance(name, str)
    return name


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """One group's own settings; None: the queue's default for every group holds.

    ``weight``: its share of the claims against the other groups (1 = an equal share);
    ``max_concurrency``: its tasks running at once (0: no limit); ``rate_limit_tasks`` /
    ``rate_limit_cost``: tasks / cost units of it started per ``rate_limit_period_s``.
    """

    weight: float | None = None
    max_concurrency: int | None = None
    rate_limit_tasks: int | None = None
    rate_limit_cost: int | None = None

    def __post_init__(self) -> None:
        w = self.weight
        if w is not None and (
            isinstance(w, bool)
            or not isinstance(w, int | float)
            or not math.isfinite(w)
            or not 0 < w <= MAX_WEIGHT
        ):
            raise InvalidArgument(f"weight must be a number > 0 and <= {MAX_WEIGHT}, not {w!r}")
        for name, low in (("max_concurrency", 0), ("rate_limit_tasks", 1), ("rate_limit_cost", 1)):
            v = getattr(self, name)
            if v is not None and (
                isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_COUNT
            ):
                raise InvalidArgument(f"{name} must be an integer {low}..{MAX_COUNT}, not {v!r}")

    def to_redis(self) -> dict[str, str]:
        return {
            f.name: repr(v) if isinstance(v, float) else str(v)
            for f in fields(self)
            if (v := getattr(self, f.name)) is not None
        }

    @classmethod
    def from_redis(cls, raw: dict[Any, Any]) -> GroupSettings:
        """The stored hash; a value that does not read is left unset (the default holds)."""
        data = {text(k): text(v) for k, v in raw.items()}
        out: dict[str, Any] = {}
        for f in fields(cls):
            value = data.get(f.name, "")
            try:
                number = float(value)
            except ValueError:
                continue
            if math.isfinite(number):
                out[f.name] = number if f.name == "weight" else int(number)
        try:
            return cls(**out)
        except InvalidArgument:
            return cls()


def set_group(keys: QueueKeys, group: str, settings: GroupSettings) -> Call[None]:
    """Replace a group's own settings (all None: it keeps none). A group parked by its
    old limits is looked at again by the next claim. The hash's other fields (the group's
    claim pause and budget, ``protocol.quota``) are kept."""
    names = [f.name for f in fields(GroupSettings)]
    commands: list[Command] = [("HDEL", keys.group(group), *names)]
    stored = settings.to_redis()
    if stored:
        flat: list[str] = []
        for name, value in stored.items():
            flat += [name, value]
        commands.append(("HSET", keys.group(group), *flat))
    commands.append(("ZADD", keys.groups_parked, "XX", 0, group))
    return Call(tuple(commands), lambda replies: None, transaction=True)


def check_fair_by(unit: object) -> str | None:
    """What groups are fair by: None (claims, one per task) or a unit of provider quotas
    (their settled use of it, ``output_tokens`` say); anything else is refused."""
    if unit is None or unit == "claims":
        return None
    try:
        return validate_unit_name(unit)  # type: ignore[arg-type]
    except ValueError as exc:
        raise InvalidArgument(f"fair_by: {exc}, or 'claims'") from None


def set_fair_by(keys: QueueKeys, unit: str | None) -> Call[None]:
    """Make the queue's groups fair by their settled use of ``unit`` (None: by claims).
    The ring's current virtual times stay: the next claims and settlements charge in
    the new measure."""
    command: Command = (
        ("DEL", keys.groups_fair) if unit is None else ("SET", keys.groups_fair, unit)
    )
    return one(command, lambda reply: None)


def fair_by(keys: QueueKeys) -> Call[str | None]:
    return one(("GET", keys.groups_fair), lambda reply: None if reply is None else text(reply))


def group_settings(keys: QueueKeys, group: str) -> Call[GroupSettings]:
    return Call(
        (("HGETALL", keys.group(group)),),
        lambda replies: GroupSettings.from_redis(_as_dict(replies[0])),
    )


@dataclass(frozen=True, slots=True)
class GroupCount:
    """One group's tasks now: pending (waiting in its zset) and running; its own claim
    pause's end (epoch ms, 0: none; ``RateLimited(scope="group")``, ``pause_claims``)."""

    group: str
    pending: int
    running: int
    paused_until_ms: int = 0


def _as_dict(reply: Any) -> dict[Any, Any]:
    if isinstance(reply, dict):
        return reply
    flat = list(reply or [])
    return dict(zip(flat[::2], flat[1::2], strict=True))


def group_names(keys: QueueKeys, most: int | None = None) -> Call[list[str]]:
    """The groups with pending tasks (claimable or held back) or running ones; with
    ``most``, at most that many of each kind (a bounded read, for metrics)."""
    last = -1 if most is None else most - 1
    running: Command = ("HKEYS", keys.group_running)
    if most is not None:
        running = ("HSCAN", keys.group_running, 0, "COUNT", most)
    return Call(
        (
            ("ZRANGE", keys.groups, 0, last),
            ("ZRANGE", keys.groups_parked, 0, last),
            running,
        ),
        lambda r: sorted({text(g) for g in _names(r)} - {""}),
    )


def _names(replies: Sequence[Any]) -> list[Any]:
    ring, parked, running = replies
    if (
        isinstance(running, list | tuple)
        and len(running) == 2
        and not isinstance(running[1], bytes | str)
    ):
        found = running[1]  # HSCAN: (cursor, {field: value}) or (cursor, [field, value, ...])
        running = list(found) if isinstance(found, dict) else list(found)[::2]
    return [*ring, *parked, *running]


def by_load(counts: Sequence[GroupCount]) -> list[GroupCount]:
    """Most pending first, then most running, then by name (``Queue.groups``' order)."""
    return sorted(counts, key=lambda c: (-c.pending, -c.running, c.group))


def group_counts(
    keys: QueueKeys, groups: Sequence[str], now_ms: int | None = None
) -> Call[list[GroupCount]]:
    """Pending and running tasks of each of ``groups``, and (with ``now_ms``, the server's
    clock) the end of each one's claim pause still on, in one pipeline."""
    n = len(groups)
    commands: list[Command] = [("ZCARD", keys.group_pending(g)) for g in groups]
    commands.append(("HMGET", keys.group_running, *groups) if groups else ("PING",))
    if now_ms is not None:
        commands += [("HGET", keys.group(g), "until") for g in groups]

    def decode(replies: Sequence[Any]) -> list[GroupCount]:
        running = list(replies[n]) if groups else []
        out = []
        for i, g in enumerate(groups):
            until = 0
            if now_ms is not None:
                try:
                    until = int(float(text(replies[n + 1 + i] or "0")))
                except ValueError:
                    until = 0
                if until <= now_ms:
                    until = 0
            out.append(GroupCount(g, int(replies[i]), int(running[i] or 0), until))
        return out

    return Call(tuple(commands), decode)


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One group as ``top`` and the dashboard show it: pending and running tasks, and
    whether its own limits hold it back (parked): ``held`` '' (no), ``cap`` (at its
    concurrency cap: until one of its tasks ends) or ``rate`` (by its rate limit, until
    ``held_until_ms``, epoch ms)."""

    group: str
    pending: int
    running: int
    held: str = ""
    held_until_ms: int | None = None


def group_rows(keys: QueueKeys, groups: Sequence[str]) -> Call[list[GroupRow]]:
    """``GroupRow`` of each of ``groups``, in one pipeline (two commands a group)."""
    commands: list[Command] = []
    for g in groups:
        commands += [("ZCARD", keys.group_pending(g)), ("ZSCORE", keys.groups_parked, g)]
    commands.append(("HMGET", keys.group_running, *groups) if groups else ("PING",))

    def decode(replies: Sequence[Any]) -> list[GroupRow]:
        running = list(replies[-1]) if groups else []
        out = []
        for i, g in enumerate(groups):
            row = GroupRow(g, int(replies[2 * i]), int(running[i] or 0))
            parked = replies[2 * i + 1]
            if parked is not None:  # its score: inf until a task of it ends, else until then
                score = float(text(parked))
                held, until = ("cap", None) if math.isinf(score) else ("rate", int(score))
                row = GroupRow(row.group, row.pending, row.running, held, until)
            out.append(row)
        return out

    return Call(tuple(commands), decode)


@dataclass(frozen=True, slots=True)
class GroupTotals:
    """A queue's groups counted without reading each: those with claimable tasks (the
    ring, '' left out), those held back by their limits (parked), their pending tasks."""

    claimable: int
    held: int
    pending: int

    @property
    def groups(self) -> int:
        """Groups with pending tasks (a group only running is not counted here)."""
        return self.claimable + self.held


def group_totals(keys: QueueKeys) -> Call[GroupTotals]:
    return Call(
        (
            ("ZCARD", keys.groups),
            ("ZSCORE", keys.groups, ""),
            ("ZCARD", keys.groups_parked),
            ("GET", keys.groups_pending),
        ),
        lambda r: GroupTotals(int(r[0]) - (r[1] is not None), int(r[2]), max(0, whole(r[3]) or 0)),
    )


#: Groups a listing of pending across groups reads, in turn order: past them (a queue with
#: more groups with tasks), the listing leaves the rest out.
LANES_READ = 1000
#: Positions of pending's order across groups a listing reaches (the walk is O(n log g)).
MERGED_MAX = 100_000


@dataclass(frozen=True, slots=True)
class Lane:
    """One zset of pending as the claim serves it: a group's ('': the ungrouped tasks),
    its virtual time in the fair-claim ring, its weight, its size; ``held``: parked by its
    own limits or its claim pause (served only once it is back)."""

    group: str
    turn: float
    weight: float
    size: int
    held: bool = False


@dataclass(frozen=True, slots=True)
class LaneHeads:
    """The fair-claim ring (group, virtual time), the parked groups, the ungrouped count."""

    ring: list[tuple[str, float]]
    parked: list[str]
    ungrouped: int

    @property
    def grouped(self) -> bool:
        """Whether groups are in use: else pending is one zset, listed as it is."""
        return bool(self.ring or self.parked)


def _scored(reply: Any) -> list[tuple[str, float]]:
    """A ZRANGE WITHSCORES reply, flat (RESP2) or as pairs (RESP3, redis-py's callback)."""
    items = list(reply or ())
    if items and isinstance(items[0], list | tuple):
        return [(text(m), float(text(sc) if isinstance(sc, bytes) else sc)) for m, sc in items]
    return [(text(m), float(text(sc))) for m, sc in zip(items[::2], items[1::2], strict=True)]


def group_size(keys: QueueKeys, group: str) -> Call[int]:
    """How many tasks of ``group`` are pending (its own zset)."""
    return Call((("ZCARD", keys.group_pending(group)),), lambda r: int(r[0]))


def group_heads(keys: QueueKeys, groups: Sequence[str]) -> Call[list[str]]:
    """The next pending task of each of ``groups`` ('' where it has none), one pipeline."""
    commands: list[Command] = [("ZRANGE", keys.group_pending(g), 0, 0) for g in groups]
    return Call(
        tuple(commands) or (("PING",),),
        lambda r: [text(x[0]) if x else "" for x in r] if groups else [],
    )


def lane_heads(keys: QueueKeys) -> Call[LaneHeads]:
    """The first ``LANES_READ`` groups of the ring and of the parked set, and how many
    ungrouped tasks wait, in one round trip."""
    last = LANES_READ - 1
    return Call(
        (
            ("ZRANGE", keys.groups, 0, last, "WITHSCORES"),
            ("ZRANGE", keys.groups_parked, 0, last),
            ("ZCARD", keys.pending),
        ),
        lambda r: LaneHeads(_scored(r[0]), [text(g) for g in r[1] or ()], int(r[2])),
    )


def lanes(keys: QueueKeys, heads: LaneHeads) -> Call[list[Lane]]:
    """Each lane's size and weight (the group's own, else 1, as ``group_settings.lua``), in
    one round trip; a group of the ring at its concurrency cap is held (the claim parks it
    when it meets it). The ungrouped tasks join the ring at its lowest virtual time, as
    the claim has them join (``group_join.lua``); with every group parked, they come first."""
    ring = [(g, t) for g, t in heads.ring if g]
    parked = [g for g in heads.parked if g]
    names = [g for g, _ in ring] + parked
    commands: list[Command] = [("HGET", keys.config, "group_max_concurrency")]
    for g in names:
        commands += [
            ("ZCARD", keys.group_pending(g)),
            ("HMGET", keys.group(g), "weight", "max_concurrency"),
            ("HGET", keys.group_running, g),
        ]

    def decode(replies: Sequence[Any]) -> list[Lane]:
        default_cap = _positive(replies[0]) or 0.0
        out: list[Lane] = []
        for i, g in enumerate(names):
            size, (weight, cap), running = replies[1 + 3 * i : 4 + 3 * i]
            limit = _positive(cap) or default_cap
            full = bool(limit) and (_positive(running) or 0.0) >= limit
            turn = ring[i][1] if i < len(ring) else 0.0
            held = i >= len(ring) or full
            out.append(Lane(g, turn, _positive(weight) or 1.0, int(size), held=held))
        if heads.ungrouped:
            own = dict(heads.ring).get("")
            lowest = min((t for _, t in heads.ring), default=0.0)
            out.append(Lane("", lowest if own is None else own, 1.0, heads.ungrouped))
        return out

    return Call(tuple(commands), decode)


def _positive(value: Any) -> float | None:
    """A stored number > 0 and finite, else None."""
    try:
        n = float(text(value)) if value is not None else math.nan
    except ValueError:
        return None
    return n if math.isfinite(n) and n > 0 else None


def fair_order(found: Sequence[Lane], offset: int, count: int) -> list[tuple[str, int]]:
    """Positions ``offset .. offset+count-1`` of the order the claim serves ``found`` in,
    each as (group, rank in its zset): the lowest virtual time first (ties by name, as
    ZRANGE), a lane moving on by 1 / weight per task taken; the held lanes after, in turn
    among themselves. Pure; O((offset + count) log lanes)."""
    out: list[tuple[str, int]] = []
    end = min(offset + count, MERGED_MAX)
    pos = 0
    for held in (False, True):
        heap = [(0.0 if held else ln.turn, ln.group, 0, ln) for ln in found if ln.held is held]
        heap = [h for h in heap if h[3].size > 0]
        heapq.heapify(heap)
        while heap and pos < end:
            turn, group, rank, ln = heapq.heappop(heap)
            if pos >= offset:
                out.append((group, rank))
            pos += 1
            if rank + 1 < ln.size:
                heapq.heappush(heap, (turn + 1 / ln.weight, group, rank + 1, ln))
    return out


def lane_ids(keys: QueueKeys, slots: Sequence[tuple[str, int]]) -> Call[list[str]]:
    """The ids at ``slots`` (``fair_order``'s), in that order: one ZRANGE per lane over
    the ranks it holds on the page ('' past a lane's end: tasks left it meanwhile)."""
    spans: dict[str, tuple[int, int]] = {}
    for g, rank in slots:
        lo, hi = spans.get(g, (rank, rank))
        spans[g] = (min(lo, rank), max(hi, rank))
    groups = list(spans)
    commands: list[Command] = [
        ("ZRANGE", keys.group_pending(g) if g else keys.pending, *spans[g]) for g in groups
    ]
    if not commands:
        commands.append(("PING",))

    def decode(replies: Sequence[Any]) -> list[str]:
        read = {g: [text(m) for m in replies[i] or ()] for i, g in enumerate(groups)}
        out = []
        for g, rank in slots:
            got = read[g]
            at = rank - spans[g][0]
            out.append(got[at] if at < len(got) else "")
        return out

    return Call(tuple(commands), decode)
