"""The script bundle: built from lua/ with explicit includes, committed, drift-checked, and
what Redis gets; every argument declared once (signatures.py) and packed by name."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from taskfleet.protocol import signatures
from taskfleet.protocol.bundle import NAMES, manifest, source
from taskfleet.protocol.bundle.__main__ import HERE, expected, main, stale
from taskfleet.protocol.bundle.build import LUA, BuildError, build, params
from taskfleet.protocol.control_ops import ControlOps, Report, Scan
from taskfleet.protocol.keys import KEY_DOCS, SCRIPT_KEYS, QueueKeys
from taskfleet.protocol.output import emit_op
from taskfleet.protocol.provider_quota import ProviderQuotaOps, QuotaSlotOps, defer_op, settle_op
from taskfleet.protocol.queue_ops import EnqueueArgs, Ops
from taskfleet.protocol.quota import QuotaOps
from taskfleet.protocol.runwrites import checkpoint_op
from taskfleet.protocol.schedule_ops import ScheduleOps
from taskfleet.protocol.schedules import FirePlan, ScheduleDef
from taskfleet.protocol.scripts import Op

_MARKER = re.compile(r"^-- includes/(\w+)\.lua$", re.M)
_INCLUDE = re.compile(r'^--- @include "(\w+)"$', re.M)
_ANY_INCLUDE = re.compile(r'^--- @include(?:-lazy)? "(\w+)"$', re.M)


def test_the_committed_bundle_is_what_the_sources_build() -> None:
    assert stale(expected()) == []
    assert main(["--check"]) == 0


def test_an_altered_missing_or_stray_bundle_file_fails_the_drift_check(tmp_path: Path) -> None:
    for path in HERE.glob("*.lua"):
        shutil.copy(path, tmp_path / path.name)
    shutil.copy(HERE / "manifest.json", tmp_path / "manifest.json")
    files = expected(bundle_dir=tmp_path, docs=None)
    assert stale(files, tmp_path) == []
    claim = tmp_path / "claim.lua"
    claim.write_bytes(claim.read_bytes().replace(b"return out", b"return out "))
    (tmp_path / "sweep.lua").unlink()
    (tmp_path / "old.lua").write_text("return 1\n")
    assert stale(files, tmp_path) == [
        "claim.lua: differs from what lua/ and signatures.py build",
        "sweep.lua: missing",
        "old.lua: no script makes it",
    ]


def test_the_manifest_names_every_script_once_with_the_sha1_of_its_bytes(
    redis_client: redis.Redis,
) -> None:
    scripts = manifest()["scripts"]
    assert tuple(scripts) == NAMES == tuple(signatures.SCRIPTS)
    for name, entry in scripts.items():
        data = (HERE / entry["file"]).read_bytes()
        assert entry["sha1"] == hashlib.sha1(data).hexdigest()
        assert source(name).encode() == data
        # what Redis makes of those bytes: the SHA1 a client calls EVALSHA with
        assert redis_client.script_load(data) == entry["sha1"]
        assert redis_client.script_exists(entry["sha1"]) == [True]


def test_the_manifest_lists_every_key_in_keys_order_with_its_suffix_and_type() -> None:
    data = manifest()
    assert data["protocol"] == signatures.PROTOCOL
    assert [k["name"] for k in data["keys"]] == list(SCRIPT_KEYS) == list(KEY_DOCS)
    full = data["key_prefix"].replace("%QUEUE%", "jobs")
    assert [full + k["suffix"] for k in data["keys"]] == list(QueueKeys("jobs").script_keys)
    prefixes = [k["name"] for k in data["keys"] if k["is_prefix"]]
    assert prefixes == [
        "task",
        "pod",
        "sched",
        "wake",
        "schedule",
        "waiter",
        "dependants",
        "group_pending",
        "group",
        "group_bucket",
        "flow",
        "output",
        "rate",
        "follow",
    ]


@pytest.mark.parametrize("name", NAMES)
def test_records_are_counted_by_a_required_int_argument_n(name: str) -> None:
    entry = manifest()["scripts"][name]
    if entry["repeated"] is None:
        assert "n" not in [a["name"] for a in entry["args"]]
        return
    assert entry["repeated"]["count"] == "n"
    [count] = [a for a in entry["args"] if a["name"] == "n"]
    assert (count["type"], count["optional"]) == ("int", False)
    for arg in [*entry["args"], *entry["repeated"]["fields"]]:
        assert arg["type"] in ("int", "number", "string", "bytes", "json")
        assert arg["doc"]


def _shape(op: Op[Any]) -> tuple[int, int]:
    """(records in the call, values per record), checking the call's width against them."""
    declared = signatures.SCRIPTS[op.script]
    named = [p.name for p in params(declared.args)]
    if declared.record is None:
        assert len(op.args) == len(named)
        return 0, 0
    n = op.args[named.index("n")]
    assert isinstance(n, int)
    width = len(params(declared.record))
    assert len(op.args) == len(named) + n * width
    return n, width


def test_only_a_call_of_plain_tasks_goes_to_enqueue_plain_and_leaves_hand_offs_to_enqueue() -> None:
    ops, keys = Ops(QueueKeys("jobs")), QueueKeys("jobs")
    task = EnqueueArgs("t1", "{}", 0, 0, "", "", 1, "")
    plain = ops.enqueue([task, task._replace(task_id="t2", delay_ms=5, deadline="9")], "base")
    assert (plain.script, tuple(plain.keys)) == ("enqueue_plain", keys.script("enqueue_plain"))
    assert list(plain.args[:3]) == [2, 1, ""]  # n, hand_off (a token base given), trace
    assert ops.enqueue([task]).args[1] == 0  # no token base: no hand-off
    # enqueue_plain's [0] (an idle worker waits): the same tasks go to enqueue, handed over
    assert plain.instead([1, 1, 1]) is None
    whole = plain.instead([0])
    assert whole is not None and whole.script == "enqueue"
    assert tuple(whole.keys) == keys.script("enqueue") and whole.args[1] == "base"
    for other in (
        ops.enqueue([task._replace(group="g")]),
        ops.enqueue([task._replace(after='["t0"]')]),
        ops.enqueue([task._replace(on_dep_fail="ignore")]),
        ops.enqueue([task], flow="t1"),
        ops.enqueue([task], parent=("p", "tok")),
    ):
        assert (other.script, other.fallback) == ("enqueue", None)


def test_every_op_builder_packs_the_declared_arguments_then_its_records() -> None:
    keys = QueueKeys("jobs")
    ops, control, schedule = Ops(keys), ControlOps(keys), ScheduleOps(keys)
    task = EnqueueArgs("t1", "{}", 0, 0, "", "", 1, "")
    plan = FirePlan("s", "3", 60, [60, 120], 0, None, 0)
    definition = ScheduleDef(name="s", cron="* * * * *", payload="{}")
    built: list[tuple[Op[Any], tuple[int, int]]] = [
        (ops.enqueue([task, task]), (2, 8)),
        (ops.enqueue([task], "base", "00-trace"), (1, 8)),
        (ops.enqueue([task._replace(group="g")], "base", "00-trace"), (1, 12)),
        (ops.claim("p", "i", 4, "base", 100, idle_ms=5, prefetch=1), (0, 0)),
        (ops.extend("p", "i", [("t", "k")], inflight=1, draining=False, concurrency=2), (1, 2)),
        (ops.complete([("t", "k", None)]), (1, 3)),
        (
            ops.complete_and_claim(
                [("t", "k", "1")], pod="p", incarnation="i", n=1, token_base="b", bound=10
            ),
            (1, 3),
        ),
        (ops.fail("t", "k", "e", retryable=True, jitter=0.5, reason=""), (0, 0)),
        (ops.fail("t", "k", "e", retryable=True, jitter=0.5, reason="", retry_after_ms=9), (0, 0)),
        (ops.fail("t", "k", "e", retryable=True, jitter=0.5, reason="", throttle=True), (0, 0)),
        (QuotaOps(keys).pause(5, "429"), (0, 0)),
        (QuotaOps(keys).resume(), (0, 0)),
        (QuotaOps(keys).budget(day=3, month="default"), (0, 0)),
        (ProviderQuotaOps("openai").configure({"requests": 5}, 60_000, None), (0, 0)),
        (settle_op(keys, "t", "k", "openai", {"input_tokens": 5}), (0, 0)),
        (QuotaSlotOps("openai").reserve("m", '{"requests":1}', 30_000), (1, 1)),
        (QuotaSlotOps("openai").end(["m", "n"], refund=True), (2, 1)),
        (defer_op(keys, "t", "k", 500, "openai"), (0, 0)),
        (ops.release("p", [("t", "k"), ("u", "l")]), (2, 2)),
        (ops.requeue("p", None), (0, 0)),
        (ops.register("p", "i", 2), (0, 0)),
        (ops.deregister("p", "i"), (0, 0)),
        (ops.disown("p", "i", ["b1", "b2", "b3"]), (3, 1)),
        (ops.watch("w", ["t"]), (1, 1)),
        (ops.sweep(), (0, 0)),
        (ops.repair(3), (0, 0)),
        (control.cancel(["t", "u"]), (2, 1)),
        (control.retry(task_ids=["t"]), (1, 1)),
        (control.promote(["t", "u"]), (2, 1)),
        (control.retry(scan=Scan(reason="failed")), (0, 1)),
        (control.drop("done", task_ids=["t", "u"]), (2, 1)),
        (control.drop("dead", scan=Scan(oldest_ms=5, newest_ms=9)), (0, 1)),
        (control.report([Report("t", "k", '{"fraction":1}')]), (1, 4)),
        (checkpoint_op(keys, "t", "k", '{"step":1}', keep=False), (0, 0)),
        (emit_op(keys, "t", "k", "t", "chunk"), (0, 0)),
        (
            schedule.put(
                definition,
                owner="",
                take_over=False,
                paused=False,
                first_slot=60,
                first_due_ms=60_000,
            ),
            (len(definition.fields()), 2),
        ),
        (schedule.delete("s", owner=""), (0, 0)),
        (schedule.pause("s", True, owner="", next_slot=None, next_due_ms=0), (0, 0)),
        (schedule.due(10, 1000), (0, 0)),
        (schedule.fire([plan]), (1, 7)),
    ]
    assert {op.script for op, _ in built} == set(NAMES)
    for op, shape in built:
        assert _shape(op) == shape, op.script
    fired = schedule.fire([plan]).args
    assert fired[1 + 3] == "[60,120]"  # a plan's slots: one JSON array


def _copy_lua(tmp_path: Path) -> Path:
    root = tmp_path / "lua"
    shutil.copytree(LUA, root)
    return root


def test_an_include_cycle_is_refused(tmp_path: Path) -> None:
    root = _copy_lua(tmp_path)
    (root / "includes" / "ping.lua").write_text(
        '--- @include "pong"\nlocal function ping(n) return pong(n - 1) end\n'
    )
    (root / "includes" / "pong.lua").write_text(
        '--- @include "ping"\nlocal function pong(n) if n > 0 then return ping(n) end end\n'
    )
    watch = root / "watch.lua"
    watch.write_text('--- @include "ping"\n' + watch.read_text() + "ping(2)\n")
    with pytest.raises(BuildError, match="include cycle ping -> pong -> ping"):
        build(root)


def test_an_include_never_used_is_refused(tmp_path: Path) -> None:
    """It would cost every call of the script and serve none."""
    root = _copy_lua(tmp_path)
    watch = root / "watch.lua"
    watch.write_text('--- @include "demand"\n' + watch.read_text())
    with pytest.raises(BuildError, match=r"lua/watch\.lua: includes demand and never uses it"):
        build(root)


def test_an_unknown_include_or_a_malformed_directive_is_refused(tmp_path: Path) -> None:
    root = _copy_lua(tmp_path)
    claim = root / "claim.lua"
    original = claim.read_text()
    claim.write_text('--- @include "no_such_helper"\n' + original + "no_such_helper()\n")
    with pytest.raises(BuildError, match=r"lua/claim\.lua: unknown include 'no_such_helper'"):
        build(root)
    claim.write_text("--- @includes now_ms\n" + original)
    with pytest.raises(BuildError, match=r"lua/claim\.lua:1: not an include line"):
        build(root)


def test_a_helper_used_without_being_included_is_refused(tmp_path: Path) -> None:
    root = _copy_lua(tmp_path)
    watch = root / "watch.lua"
    watch.write_text(watch.read_text().replace("return table.concat(out)", "notify(1)\nreturn 1"))
    with pytest.raises(BuildError, match=r"lua/watch\.lua: uses notify without including it"):
        build(root)


def test_a_lazy_include_that_is_also_needed_eagerly_is_refused(tmp_path: Path) -> None:
    root = _copy_lua(tmp_path)
    enqueue = root / "enqueue.lua"
    enqueue.write_text(
        enqueue.read_text().replace('@include-lazy "hand_off"', '@include-lazy "demand"')
    )
    with pytest.raises(BuildError, match="lazy 'demand' is also included eagerly"):
        build(root)


def _closure(roots: list[str]) -> list[str]:
    seen: list[str] = []

    def visit(name: str) -> None:
        if name not in seen:
            for dep in _ANY_INCLUDE.findall((LUA / "includes" / f"{name}.lua").read_text()):
                visit(dep)
            seen.append(name)

    for root in roots:
        visit(root)
    return seen


@pytest.mark.parametrize("name", NAMES)
def test_a_script_carries_what_it_includes_once_each_after_what_that_includes(name: str) -> None:
    carried = _MARKER.findall(source(name))
    assert len(carried) == len(set(carried))
    roots = _INCLUDE.findall((LUA / f"{name}.lua").read_text())
    lazy = re.findall(r'^--- @include-lazy "(\w+)"$', (LUA / f"{name}.lua").read_text(), re.M)
    assert set(carried) == set(_closure(roots + lazy))
    for i, helper in enumerate(carried):
        text = (LUA / "includes" / f"{helper}.lua").read_text()
        for dep in _INCLUDE.findall(text):
            assert dep in carried[:i], f"{name}: {helper} before its include {dep}"
    assert len(carried) < len(list((LUA / "includes").glob("*.lua"))), "the whole library"


@pytest.mark.parametrize("path", sorted((LUA / "includes").glob("*.lua")), ids=lambda p: p.name)
def test_a_helper_file_holds_only_its_definition_and_constants_at_its_top_level(
    path: Path,
) -> None:
    """Helpers may be built inside the lazy loader: anything at the top level but local
    definitions would run there instead."""
    name = path.name.removesuffix(".lua")
    defined = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line and not line[0].isspace():
            found = re.match(r"local (?:function )?([A-Za-z_]\w*)", line)
            assert found or re.match(r"(--|end$|}$)", line), f"{path.name}:{number}: {line}"
            if found:
                defined.append(found.group(1))
    assert name in defined or name.upper() in defined
    assert all(d in (name, name.upper()) or d.isupper() for d in defined), defined


def _lazy_parts(name: str) -> tuple[str, set[str], set[str], str]:
    """A script's text before its lazy loader, what the loader builds, its lazy roots, and
    the script's own code (comments dropped)."""
    full = source(name)
    top, _, rest = full.partition("build_lazy = function()\n")
    loader, found, after = rest.partition("\nend\nlocal build_all = build_lazy\n")
    assert loader and found and after, f"{name}.lua builds its lazy helpers in one loader"
    roots = set(re.findall(r"^local ([\w, ]+), build_lazy$", top, re.M)[0].split(", "))
    defined = re.compile(r"^local (?:function )?([A-Za-z_]\w*)", re.M)
    body = full.partition(f"-- {name}.lua\n")[2]
    code = "\n".join(line for line in body.splitlines() if not line.startswith("--"))
    return top, set(defined.findall(loader)), roots, code


def test_what_only_the_lazy_hand_off_uses_is_built_inside_its_loader() -> None:
    """enqueue.lua's hand-off to idle workers (and the claim code only it needs), its flow
    helpers and the dependants' resolution are built on the first call of any of them: a
    single enqueue of a plain task with no idle worker builds none of it."""
    top, built_lazily, roots, code = _lazy_parts("enqueue")
    assert {"hand_off", "claim_tasks", "flow_hold", "task_differs", "flow_resolve"} <= built_lazily
    assert roots <= built_lazily
    # at the top, the roots are only declared (their stubs build the rest): nothing twice
    defined = re.compile(r"^local (?:function )?([A-Za-z_]\w*)", re.M)
    assert built_lazily & set(defined.findall(top)) <= roots
    used = set(re.findall(r"[A-Za-z_]\w*", code))
    assert used & built_lazily <= roots, "the script itself calls only lazy roots"


def test_a_helpers_lazy_include_is_built_lazily_unless_the_script_needs_it_at_once() -> None:
    """flush_counts resolves dependants (flow_resolve) only when a task of the call had
    some: claim builds it lazily; complete, whose own helpers need what it needs, still
    carries it once."""
    _, built_lazily, roots, _ = _lazy_parts("claim")
    assert "flow_resolve" in roots and "flow_resolve" in built_lazily
    for name in NAMES:
        assert source(name).count("\n-- includes/flow_resolve.lua\n") <= 1


def test_the_bundle_is_read_not_built_at_run_time() -> None:
    """A client loads the committed text: the builder is never imported."""
    probe = (
        "import sys, taskfleet.protocol.scripts as s, taskfleet.protocol.bundle as b; "
        "b.source('claim'); print(sorted(m for m in sys.modules if 'bundle.' in m))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert shown.strip() == "[]"
