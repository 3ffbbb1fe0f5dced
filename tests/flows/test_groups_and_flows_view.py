"""What ``taskfleet top`` and the dashboard show of groups and flows, read from a real
redis-server: a queue's biggest groups and an "other" line, bounded whatever the number
of groups; the tree of a flow around a task (``producer.flowtree``), bounded, with a
task pruned by retention shown as gone; ``top``'s frame drawn from them."""

from __future__ import annotations

import json
import subprocess
import sys

from rich.console import Console
from taskfleet import Queue, QueueConfig
from taskfleet.cli.flowtree import lines_of, tree_lines
from taskfleet.cli.top import render
from taskfleet.producer import overview
from taskfleet.producer.flows import chain, chord, group
from taskfleet.producer.flowtree import flow_tree
from taskfleet.protocol.calls import run
from taskfleet.protocol.control_ops import Report
from taskfleet.protocol.groups import GroupRow, GroupSettings, GroupTotals

from tests.fixtures_redis import MakeBroker


def _frame(views: list[overview.QueueView]) -> str:
    console = Console(width=140, record=True, force_terminal=False)
    console.print(render(views, {}))
    return console.export_text()


def test_a_queue_without_groups_shows_no_groups_and_top_draws_none(queue: Queue) -> None:
    queue.enqueue({"plain": 1})
    view = overview.read(queue.client, "jobs")
    assert view.groups == overview.GroupsView()
    assert "groups" not in _frame([view])


def test_the_biggest_groups_are_shown_and_the_rest_summed_on_one_line(
    queue: Queue, make_broker: MakeBroker
) -> None:
    for i, size in enumerate((2, 9, 3, 7, 2, 5, 4, 6)):
        queue.enqueue_many([{"payload": {"n": n}, "group": f"g{i}"} for n in range(size)])
    queue.enqueue({"plain": 1})  # ungrouped: no group's line
    make_broker("jobs", "pod-a").claim(3)  # one task of each of three groups runs

    view = overview.read(queue.client, "jobs")
    g = view.groups
    assert len(g.shown) == overview.GROUPS_SHOWN
    assert g.groups == 8 and g.complete
    by_group = {r.group: r for r in queue.groups()}
    top = sorted(by_group.values(), key=lambda c: (-c.pending, -c.running, c.group))
    assert [r.group for r in g.shown] == [c.group for c in top[:5]]
    assert [(r.pending, r.running) for r in g.shown] == [(c.pending, c.running) for c in top[:5]]
    rest = top[5:]
    assert g.other_groups == 3
    assert g.other_pending == sum(c.pending for c in rest)
    assert g.other_running == sum(c.running for c in rest)
    assert view.counts["pending"] + view.counts["running"] == 38 + 1  # the ungrouped one too

    frame = _frame([view])
    assert "jobs: groups (8 with pending)" in frame
    assert "other (3)" in frame
    for r in g.shown:
        assert r.group in frame


def test_a_group_at_its_cap_and_one_held_by_its_rate_limit_say_so(
    queue: Queue, make_broker: MakeBroker, redis_url: str
) -> None:
    queue.configure(QueueConfig(rate_limit_period_s=60))
    queue.set_group("capped", GroupSettings(max_concurrency=1))
    queue.set_group("limited", GroupSettings(rate_limit_tasks=1))
    for g in ("capped", "limited", "free"):
        queue.enqueue_many([{"payload": {"i": i}, "group": g} for i in range(3)])
    worker = make_broker("jobs", "pod-a")
    worker.claim(10)

    rows = {r.group: r for r in overview.read(queue.client, "jobs").groups.shown}
    assert (rows["capped"].held, rows["capped"].held_until_ms) == ("cap", None)
    limited = rows["limited"]
    assert limited.held == "rate" and limited.held_until_ms is not None
    assert limited.held_until_ms > run(queue.client, queue.reads.clock())  # a time to come
    assert rows["free"].held == ""  # all three of its tasks were claimed
    frame = _frame([overview.read(queue.client, "jobs")])
    assert "cap" in frame and "rate" in frame
    # the snapshot --json prints is strict JSON (no Infinity for a capped group)
    result = subprocess.run(
        [sys.executable, "-m", "taskfleet", "top", "--json", "--redis-url", redis_url],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    [jobs] = json.loads(result.stdout, parse_constant=_refuse)
    assert {g["group"]: g["held"] for g in jobs["groups"]["shown"]}["capped"] == "cap"


def _refuse(name: str) -> None:
    raise AssertionError(f"{name} is not JSON")


def test_ten_thousand_groups_are_read_in_bounded_commands(queue: Queue) -> None:
    queue.enqueue_many([{"payload": {}, "group": f"t{i:05d}"} for i in range(10_000)])
    queue.enqueue_many([{"payload": {"n": n}, "group": "whale"} for n in range(30)])
    client = queue.client
    before = client.info("commandstats")
    view = overview.read(client, "jobs")
    after = client.info("commandstats")

    def calls(name: str) -> int:
        return int(after.get(name, {}).get("calls", 0)) - int(before.get(name, {}).get("calls", 0))

    # a group costs two commands of the second pipeline; never all 10,001
    assert calls("cmdstat_zcard") <= 3 * overview.GROUPS_READ + 20
    assert calls("cmdstat_zscore") <= 3 * overview.GROUPS_READ + 5
    g = view.groups
    assert g.groups == 10_001 and not g.complete
    assert len(g.shown) == overview.GROUPS_SHOWN
    assert g.other_pending == 10_030 - sum(r.pending for r in g.shown)  # exact from the total
    assert g.other_groups == 10_001 - overview.GROUPS_SHOWN


def test_biggest_ranks_by_pending_then_running_then_name() -> None:
    rows = [GroupRow("b", 1, 0), GroupRow("a", 1, 0), GroupRow("c", 1, 2), GroupRow("z", 0, 4)]
    view = overview.biggest(rows, GroupTotals(3, 0, 3), complete=True)
    assert [r.group for r in view.shown] == ["c", "a", "b", "z"]
    assert (view.other_groups, view.other_pending, view.other_running) == (0, 0, 0)


def test_the_waiting_count_is_a_line_of_top_only_when_some_wait(queue: Queue) -> None:
    first = queue.enqueue({"n": 1})
    assert "waiting" not in _frame([overview.read(queue.client, "jobs")])
    queue.enqueue({"n": 2}, after=[first])
    queue.enqueue({"n": 3}, after=[first])
    view = overview.read(queue.client, "jobs")
    assert view.counts["waiting"] == 2
    assert "jobs: 2 waiting for their dependencies" in _frame([view])


def test_the_tree_shows_dependencies_down_and_dependants_up_with_states_and_progress(
    queue: Queue, make_broker: MakeBroker
) -> None:
    pages = group(*({"payload": {"page": i}, "task_id": f"p{i}"} for i in range(3)))
    queue.enqueue_flow(chord(pages, {"payload": {}, "task_id": "merge"}))
    late = queue.enqueue({"n": 1}, after=["merge"], task_id="publish")
    broker = make_broker("jobs")
    [first, *_] = broker.claim(1).tasks
    assert broker.report([Report(first.id, first.token, '{"done": 1, "total": 4}')]) == [True]

    tree = flow_tree(queue.client, queue.reads, "merge")
    assert [(n.id, n.depth, n.state) for n in tree.nodes] == [
        ("merge", 0, "waiting"),
        ("p0", 1, "running" if first.id == "p0" else "pending"),
        ("p1", 1, "running" if first.id == "p1" else "pending"),
        ("p2", 1, "running" if first.id == "p2" else "pending"),
    ]
    assert tree.nodes[0].deps_left == 3
    running = next(n for n in tree.nodes if n.id == first.id)
    assert running.done_fraction == 0.25
    assert [(n.id, n.state) for n in tree.dependants] == [(late, "waiting")]
    lines = tree_lines(queue, "merge")
    assert lines[0] == "merge  waiting 3 left"
    assert f"  {first.id}  running 25%" in lines
    assert lines[-2:] == ["waited on by:", "  publish  waiting 1 left"]


def test_a_task_pruned_by_retention_is_shown_gone(queue: Queue, make_broker: MakeBroker) -> None:
    queue.enqueue_flow(
        chain({"payload": {}, "task_id": "a"}, {"payload": {}, "task_id": "b"}),
    )
    queue.enqueue({}, after=["b"], task_id="c")
    broker = make_broker("jobs")
    [a] = broker.claim(1).tasks
    broker.complete(a.id, a.token, None)
    assert queue.purge_tasks("done", ["a"]) == 1
    tree = flow_tree(queue.client, queue.reads, "c")
    assert [(n.id, n.gone) for n in tree.nodes] == [("c", False), ("b", False), ("a", True)]
    assert tree_lines(queue, "c")[-1] == "    a  (gone)"


def test_the_tree_reads_at_most_its_limit_of_tasks(queue: Queue) -> None:
    deps = queue.enqueue_many([{"payload": {"i": i}} for i in range(30)])
    queue.enqueue({}, after=deps, task_id="fan-in")
    tree = flow_tree(queue.client, queue.reads, "fan-in", limit=10)
    assert len(tree.nodes) == 10 and tree.cut
    assert lines_of(tree)[-1] == "  ..."
    assert flow_tree(queue.client, queue.reads, deps[0]).dependants[0].id == "fan-in"


def test_a_task_outside_any_flow_has_no_tree(queue: Queue) -> None:
    alone = queue.enqueue({"n": 1})
    assert flow_tree(queue.client, queue.reads, alone).empty
    assert tree_lines(queue, alone) == []
