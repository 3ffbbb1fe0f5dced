"""What must hold after every step of test_properties.py's state machine, read from the store.

Each task in exactly one state and none lost; running tasks fenced by a live token and held
by exactly one pod; counters adding up; groups counting their tasks within their caps; runs
of deadlines keeping their promise; flows' records counting their members; no task waiting
with nothing left to wait for; none dead as expired after it started. The rules that drive
the machine, and the model they keep of what the store acknowledged (the attributes
declared below), are in test_properties.py.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import redis
from hypothesis.stateful import invariant
from taskfleet import Queue
from taskfleet.protocol.records import text
from taskfleet.protocol.tasks import FLOW_COUNTERS

MAX_CONCURRENCY = 5  # below what two pods claiming up to 4 each would take
STATES = ("pending", "delayed", "running", "done", "dead", "cancelled", "waiting")
FINISHED = ("done", "dead", "cancelled")
GROUPS = ("a", "b")  # tasks of groups wait in their group's own zset (protocol.md 4.16)
GROUP_CAP = 2


class ProtocolInvariants:
    """The invariants, and the store reads they share with the rules: a mixin of the state
    machine (hypothesis collects ``@invariant`` methods from every base class)."""

    raw: redis.Redis
    queue: Queue
    enqueued: set[str]
    completed: set[str]  # accepted completions: must stay done
    failed_dead: set[str]  # fail() answered dead: must stay dead
    held: dict[str, dict[str, str]]  # pod -> task id -> the token its claim returned
    cancel_acked: set[str]  # cancel answered cancelled or requested
    replayed: Counter[str]  # reasons of the dead tasks sent back
    after: dict[str, tuple[list[str], str]]  # dependant -> (deps, policy)

    def members(self) -> dict[str, dict[str, float]]:
        pipe = self.raw.pipeline(transaction=True)
        for state in STATES:
            pipe.zrange(getattr(self.queue.keys, state), 0, -1, withscores=True)
        pipe.zrange(self.queue.keys.deadlines, 0, -1)
        for group in GROUPS:
            pipe.zrange(self.queue.keys.group_pending(group), 0, -1, withscores=True)
        replies = pipe.execute()
        out = {
            state: {text(m): score for m, score in reply}
            for state, reply in zip(STATES, replies[: len(STATES)], strict=True)
        }
        out["deadlines"] = {text(m): 0.0 for m in replies[len(STATES)]}
        for reply in replies[len(STATES) + 1 :]:
            for m, score in reply:
                assert text(m) not in out["pending"], f"{text(m)} pending twice"
                out["pending"][text(m)] = score
        return out

    @invariant()
    def groups_count_their_tasks_and_keep_their_caps(self) -> None:
        """groups:pending counts the tasks in the groups' zsets, groups:running each
        group's running tasks (at most its cap), and each grouped task waits in its own
        group's zset."""
        members = self.members()
        hashes = self._hashes(sorted(members["pending"]) + sorted(members["running"]))
        keys = self.queue.keys
        in_groups = {
            group: {text(m) for m in self.raw.zrange(keys.group_pending(group), 0, -1)}
            for group in GROUPS
        }
        assert int(self.raw.get(keys.groups_pending) or 0) == sum(map(len, in_groups.values()))
        for group, ids in in_groups.items():
            assert all(hashes[i].get("group") == group for i in ids), group
        running: Counter[str] = Counter(
            hashes[i]["group"] for i in members["running"] if hashes[i].get("group")
        )
        stored = {text(g): int(n) for g, n in self.raw.hgetall(keys.group_running).items()}
        assert stored == dict(running)
        assert all(n <= GROUP_CAP for n in running.values()), running

    @invariant()
    def every_task_is_in_exactly_one_state_and_none_is_lost(self) -> None:
        members = self.members()
        seen: dict[str, str] = {}
        for state in STATES:
            for task_id in members[state]:
                assert task_id not in seen, f"{task_id} in {seen.get(task_id)} and {state}"
                seen[task_id] = state
        assert set(seen) == self.enqueued
        hashes = self._hashes(sorted(seen))
        for task_id, state in seen.items():
            assert hashes[task_id]["state"] == state
        for task_id in members["deadlines"]:
            assert seen[task_id] in ("pending", "delayed", "waiting")
        assert self.completed <= set(members["done"])
        assert self.failed_dead <= set(members["dead"])
        for task_id in self.cancel_acked:  # cancelled, or still running its last run
            assert seen[task_id] in ("cancelled", "running"), (task_id, seen[task_id])

    @invariant()
    def note_the_cancels_a_policy_requested(self) -> None:
        """Policy cancel asks running dependencies to stop, as a cancel by hand: noted after
        every step, so such a run ending cancelled (code 3) is expected."""
        running = sorted(self.members()["running"])
        for task_id, h in self._hashes(running).items():
            if h.get("cancel_requested"):
                self.cancel_acked.add(task_id)

    @invariant()
    def no_task_waits_with_nothing_left_to_wait_for(self) -> None:
        waiting = sorted(self.members()["waiting"])
        for task_id, h in self._hashes(waiting).items():
            deps = self.after[task_id][0]
            states = self._hashes(deps)
            open_deps = [d for d in deps if states[d].get("state") not in FINISHED]
            assert 1 <= int(h["deps_left"]) <= len(open_deps), (task_id, h, states)

    @invariant()
    def running_tasks_have_a_live_token_and_exactly_one_pod(self) -> None:
        members = self.members()
        running = members["running"]
        hashes = self._hashes(sorted(running))
        pod_sets = {
            text(key).removeprefix(self.queue.keys.pod_prefix): {
                text(m) for m in self.raw.smembers(key)
            }
            for key in self.raw.scan_iter(match=self.queue.keys.pod_prefix + "*")
        }
        holders: dict[str, list[str]] = {}
        for pod, ids in pod_sets.items():
            for task_id in ids:
                holders.setdefault(task_id, []).append(pod)
        assert set(holders) == set(running)
        assert len(running) <= MAX_CONCURRENCY
        for task_id, lease in running.items():
            h = hashes[task_id]
            assert h.get("token")
            assert holders[task_id] == [h["pod"]]
            assert float(h["lease_until"]) == lease
        # a token a worker still holds is either current (task running on that pod) or stale
        for pod, held in self.held.items():
            for task_id, token in held.items():
                h = self._hashes([task_id])[task_id]
                if h.get("token") == token:
                    assert (h["state"], h["pod"]) == ("running", pod)

    @invariant()
    def counters_add_up(self) -> None:
        stats = self.queue.stats()
        members = self.members()
        for state in STATES:
            assert stats[state] == len(members[state])
        assert stats["enqueued"] == len(self.enqueued)
        assert stats["completed"] == stats["done"]  # nothing is pruned within a run
        replayed = self.replayed
        # a flow's retry sends cancelled tasks back too (counted under reason "cancelled")
        revived = replayed["cancelled"]
        assert stats["dead_total"] == len(members["dead"]) + sum(replayed.values()) - revived
        assert stats["replayed"] == sum(replayed.values())
        assert stats["cancelled_total"] == len(members["cancelled"]) + revived
        # a cancelled task taken back is lost but not requeued: it ends cancelled
        lost_ended = stats["requeued"] + self._dead_with("worker lost") + replayed["worker lost"]
        assert lost_ended <= stats["lost"] <= lost_ended + stats["cancelled_total"]
        failed_ended = self._dead_with("failed") + replayed["failed"]
        assert stats["failed"] == stats["retried"] + failed_ended
        assert stats["expired"] == self._dead_with("expired") + replayed["expired"]

    @invariant()
    def every_run_of_deadlines_keeps_its_promise(self) -> None:
        """docs/protocol.md 4.13: the pending tasks within a run's scores are never-started
        tasks of one priority with a deadline, deadlines not decreasing with the score."""
        pipe = self.raw.pipeline(transaction=True)
        pipe.zrange(self.queue.keys.deadline_runs, 0, -1, withscores=True)
        pipe.zrange(self.queue.keys.pending, 0, -1, withscores=True)
        runs, pending = pipe.execute()
        for member, hi in runs:
            lo, last = (float(part) for part in text(member).split(":"))
            assert lo <= hi and math.floor(lo / 1e12) == math.floor(hi / 1e12), (member, hi)
            inside = [text(m) for m, score in pending if lo <= score <= hi]
            hashes = self._hashes(inside)
            deadlines = []
            for task_id in inside:
                h = hashes[task_id]
                assert "deadline" in h and "started_at" not in h, (member, task_id, h)
                deadlines.append(float(h["deadline"]))
            assert deadlines == sorted(deadlines) and all(d <= last for d in deadlines)

    @invariant()
    def every_flows_record_counts_its_members(self) -> None:
        """A flow's record (docs/protocol.md 4.15) counts its members as they stand: open
        the unfinished ones, done/dead/cancelled the finished ones; it has ended, with the
        outcome its members give, exactly when none is open; and the ends counted in stats
        are at least the flows ended now (a retried flow ends, and counts, again)."""
        hashes = self._hashes(sorted(self.enqueued))
        members: dict[str, Counter[str]] = {}
        for h in hashes.values():
            if h.get("flow"):
                state = h["state"] if h["state"] in FINISHED else "open"
                members.setdefault(h["flow"], Counter())[state] += 1
        ended = 0
        for flow_id, counts in members.items():
            record = self.queue.flow(flow_id)
            assert record is not None, flow_id
            stored = (record.open, record.done, record.dead, record.cancelled)
            assert stored == tuple(counts[s] for s in ("open", "done", "dead", "cancelled")), (
                flow_id,
                stored,
                counts,
            )
            assert record.ended == (record.open == 0), (flow_id, record)
            if record.ended:
                ended += 1
                outcome = "failed" if record.dead else "cancelled" if record.cancelled else "done"
                assert record.outcome == outcome, (flow_id, record)
        stats = self.queue.stats()
        assert sum(stats[n] for n in FLOW_COUNTERS.values()) >= ended

    @invariant()
    def a_task_dead_as_expired_never_started(self) -> None:
        hashes = self._hashes(list(self.members()["dead"]))
        for task_id, h in hashes.items():
            if h.get("reason") == "expired":
                assert "started_at" not in h, f"{task_id} started, then expired"

    def _dead_with(self, reason: str) -> int:
        ids = list(self.members()["dead"])
        return sum(1 for h in self._hashes(ids).values() if h.get("reason") == reason)

    def _hashes(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        pipe = self.raw.pipeline(transaction=False)
        for task_id in ids:
            pipe.hgetall(self.queue.keys.task(task_id))
        return {
            task_id: {text(k): text(v) for k, v in raw.items()}
            for task_id, raw in zip(ids, pipe.execute(), strict=True)
        }
