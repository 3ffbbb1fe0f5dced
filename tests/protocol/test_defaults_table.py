"""The one table of config defaults and bounds: what it generates is committed, an edited
generated file is drift, and a default written back as a literal anywhere else is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from taskfleet.protocol import bounds, defaults_table
from taskfleet.protocol.bundle import defaults_gen
from taskfleet.protocol.bundle.__main__ import stale
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.defaults import CONFIG_DEFAULTS, CONFIG_LIMITS, DEFAULT

REPO = Path(__file__).resolve().parents[2]
NODE_DEFAULTS = REPO / "clients" / "node" / "src" / "protocol" / "defaults.ts"


def test_the_committed_python_and_typescript_constants_are_what_the_table_generates() -> None:
    files = defaults_gen.generated()
    assert NODE_DEFAULTS in files
    assert [str(p) for p, text in files.items() if p.read_text() != text] == []


def test_an_edited_generated_file_fails_the_drift_check(tmp_path: Path) -> None:
    node = tmp_path / "clients" / "node" / "src" / "protocol" / "defaults.ts"
    node.parent.mkdir(parents=True)
    committed = NODE_DEFAULTS.read_text()
    edited = committed.replace("default: 30,", "default: 60,")
    assert edited != committed
    node.write_text(edited)
    files = defaults_gen.generated(root=tmp_path)

    assert stale(files, bundle_dir=tmp_path) == [
        "defaults.ts: differs from what lua/ and signatures.py build"
    ]
    node.write_text(committed)
    assert stale(files, bundle_dir=tmp_path) == []


def test_the_source_tree_writes_no_config_default_outside_the_table() -> None:
    assert defaults_gen.literal_defaults() == []


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("worker-image/taskfleet/protocol/lua/x.lua", "local ttl = cfg_num('lease_ttl_s', 30)"),
        ("worker-image/taskfleet/protocol/lua/includes/y.lua", "local n = cfg_num('max_lost', 3)"),
        ("worker-image/taskfleet/protocol/lua/z.lua", "local t = cfg_num('rate_limit_tasks') or 1"),
        ("worker-image/taskfleet/worker/x.py", "DEFAULT_LEASE_TTL_S = 30.0"),
        ("worker-image/taskfleet/x.py", 'CONFIG = {"backoff_max_s": 300.0}'),
        ("operator/taskfleet_operator/x.py", "    max_attempts: int = Field(default=3, ge=1)"),
        ("operator/taskfleet_operator/x.py", "    max_concurrency: int = Field(\n  default=0,"),
        ("operator/taskfleet_operator/x.py", "period = rate_limit_period_s or 1.0"),
        ("clients/node/src/worker/x.ts", "export const DEFAULT_LEASE_TTL_S = 30;"),
        ("clients/node/src/x.ts", "const ttl = leaseTtlS ?? 30;"),
        ("clients/node/src/x.ts", "  maxPayloadBytes: 1024 * 1024,"),
        ("clients/node/src/x.ts", '  leaseTtlS: f("lease_ttl_s", false, 1, false, MAX, 30),'),
        ("clients/node/src/x.ts", "  backoffJitter: 0.2,"),
    ],
)
def test_a_default_written_back_as_a_literal_is_named_by_the_drift_check(
    tmp_path: Path, path: str, line: str
) -> None:
    file = tmp_path / path
    file.parent.mkdir(parents=True)
    file.write_text(f"-- before\n{line}\n")

    found = defaults_gen.literal_defaults(root=tmp_path)

    assert len(found) >= 1, found
    assert all(problem.startswith(f"{path}:2: ") for problem in found), found


@pytest.mark.parametrize(
    "line",
    [
        'for name, low in (("max_concurrency", 0), ("rate_limit_tasks", 1)):',  # a bound
        "queue.configure(QueueConfig(lease_ttl_s=60))",  # a value that is not the default
        "if spec.max_concurrency >= 0 and max_attempts == 3:",  # comparisons
        "local ttl = cfg_num('lease_ttl_s') * 1000",
        "local t = cfg_num('rate_limit_tasks') or 0",  # an unset limit read as its off value
        "const ttl = CONFIG_FIELDS.leaseTtlS.default;",
        "ttl_seconds: int = Field(default=int(DEFAULT.lease_ttl_s), ge=2)",
    ],
)
def test_what_is_not_a_default_written_as_a_literal_passes(tmp_path: Path, line: str) -> None:
    file = tmp_path / "worker-image" / "taskfleet" / "x.py"
    file.parent.mkdir(parents=True)
    file.write_text(line + "\n")
    assert defaults_gen.literal_defaults(root=tmp_path) == []


def test_the_config_model_states_the_tables_defaults_bounds_and_docs() -> None:
    fields = QueueConfig.model_fields
    assert list(fields) == [f.name for f in defaults_table.FIELDS] == list(CONFIG_DEFAULTS)
    for f in defaults_table.FIELDS:
        info = fields[f.name]
        assert info.default == f.default == getattr(DEFAULT, f.name)
        assert info.description == f.doc == CONFIG_LIMITS[f.name].doc
        high = getattr(bounds, f.high) if isinstance(f.high, str) else f.high
        assert CONFIG_LIMITS[f.name].high == high
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        QueueConfig(lease_ttl_s=bounds.MIN_LEASE_TTL_S / 2)
    with pytest.raises(ValueError, match="less than or equal to"):
        QueueConfig(max_payload_bytes=bounds.MAX_PAYLOAD_BYTES + 1)


def test_a_bound_that_breaks_the_tables_promise_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    changed = tuple(
        defaults_table.Bound(b.name, "10**15", b.unit, b.doc) if b.name == "MAX_COUNT" else b
        for b in defaults_table.BOUNDS
    )
    monkeypatch.setattr(defaults_table, "BOUNDS", changed)
    with pytest.raises(defaults_gen.TableError, match="MAX_COUNT < 1e14"):
        defaults_gen.bounds_py()


def test_a_default_outside_its_own_bounds_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    changed = tuple(
        defaults_table.ConfigField(
            f.name, f.kind, 0.5, f.low, f.above, f.high, f.unit, f.doc, f.off
        )
        if f.name == "lease_ttl_s"
        else f
        for f in defaults_table.FIELDS
    )
    monkeypatch.setattr(defaults_table, "FIELDS", changed)
    with pytest.raises(defaults_gen.TableError, match=r"lease_ttl_s: default 0\.5 outside"):
        defaults_gen.defaults_py()


def test_a_default_taskqueue_writes_the_config_defaults_of_the_table() -> None:
    """The operator's models read their defaults from the table: a TaskQueue that sets
    nothing stores the library's defaults (the task timeout is the spec's own)."""
    from taskfleet_operator import builders
    from taskfleet_operator.models import TaskQueueSpec

    spec = TaskQueueSpec.model_validate(
        {"image": "w:dev", "handler": "app:handle", "redis": {"url": "redis://r:6379/0"}}
    )
    written = builders.queue_config(spec).model_dump()
    assert written.pop("default_timeout_s") == spec.max_task_duration_seconds
    expected = dict(CONFIG_DEFAULTS)
    expected.pop("default_timeout_s")
    assert written == expected


def test_the_protocol_docs_table_is_generated_and_an_edited_row_is_drift() -> None:
    doc = REPO / "docs" / "protocol.md"
    committed = doc.read_text()
    assert defaults_gen.generated()[doc] == committed
    row = "| `lease_ttl_s` | s | 30 |"
    assert committed.count(row) == 1
    edited = committed.replace(row, "| `lease_ttl_s` | s | 60 |")
    assert defaults_gen.protocol_md(edited) == committed
    with pytest.raises(defaults_gen.TableError, match="markers"):
        defaults_gen.protocol_md(committed.replace(defaults_gen.DOC_END, ""))
