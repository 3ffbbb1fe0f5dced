"""The Node client's generated protocol module (clients/node/src/protocol/) follows the
bundle's manifest and records.py, and the drift check fails when it does not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from taskfleet.protocol import records
from taskfleet.protocol.bundle.__main__ import HERE, expected, stale
from taskfleet.protocol.bundle.typescript import NODE_PROTOCOL, typescript
from taskfleet.protocol.keys import SCRIPT_KEYS


def _manifest() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HERE / "manifest.json").read_text())
    return data


def test_the_committed_typescript_module_is_what_the_manifest_generates() -> None:
    files = expected()
    assert NODE_PROTOCOL / "layout.ts" in files
    assert NODE_PROTOCOL / "signatures.ts" in files
    assert stale(files) == []


def test_an_edited_generated_typescript_file_fails_the_drift_check(tmp_path: Path) -> None:
    folder = tmp_path / "protocol"
    files = typescript(_manifest(), folder)
    folder.mkdir()
    for path, text in files.items():
        path.write_text(text)
    assert stale(files, tmp_path) == []
    layout = folder / "layout.ts"
    layout.write_text(layout.read_text().replace('"lease_ttl_s"', '"lease_ttl"'))
    (folder / "signatures.ts").unlink()
    assert stale(files, tmp_path) == [
        "layout.ts: differs from what lua/ and signatures.py build",
        "signatures.ts: missing",
    ]


def test_the_layout_names_every_key_and_every_record_field() -> None:
    layout = typescript(_manifest())[NODE_PROTOCOL / "layout.ts"]
    for key in SCRIPT_KEYS:
        assert f'  {key}: "' in layout  # KEY_SUFFIX
    assert "  readonly config: string;" in layout
    assert "  task(id: string): string {" in layout
    assert "  groupPending(id: string): string {" in layout
    for field in (*records.TASK_FIELDS, *records.WORKER_FIELDS, *records.CONFIG_FIELDS):
        assert f'  {field}: "{field}",' in layout
    assert f"export const WORKER_LEVEL = {records.WORKER_LEVEL};" in layout


def test_each_script_gets_an_argument_interface_with_its_optional_arguments_marked() -> None:
    signatures = typescript(_manifest())[NODE_PROTOCOL / "signatures.ts"]
    assert "export interface ClaimArgs {" in signatures
    assert "  readonly pod: string;" in signatures
    assert "  readonly idle_ms?: number | string;" in signatures
    assert "export interface EnqueueRecord {" in signatures
    assert "  sweep: never;" in signatures  # no repeated record
    assert "  enqueue: EnqueueRecord;" in signatures
