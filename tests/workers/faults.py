"""A worker that fails whenever it claims a task whose payload says ``"poison": true``.

This is a fake, and the only one these tests use: it stands for a bug not yet known in
claiming or starting a task (today's known ones are fixed and tested for real). Importing
this module, as ``taskfleet worker --handler tests.workers.faults:ok`` does, wraps the
broker's claim parsing so that it raises for such a task.
"""

from __future__ import annotations

from typing import Any

from taskfleet.protocol.replies import RawClaim
from taskfleet.worker import broker

from tests.workers.handlers import _record

_parse = broker.Broker._claimed


async def _claimed(self: broker.Broker, raw: RawClaim) -> broker.ClaimResult:
    for record in raw.records:
        packed = record.encode() if isinstance(record, str) else record
        if b'"poison":true' in packed:
            raise RuntimeError("injected: claiming this task fails")
    return await _parse(self, raw)


broker.Broker._claimed = _claimed  # type: ignore[method-assign]


def ok(payload: dict[str, Any]) -> str:
    _record("start")
    return "ok"
