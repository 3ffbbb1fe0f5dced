"""Handlers that misbehave the way real ones do, for the tests that no task stalls a fleet.

``hostile`` does what ``payload["do"]`` says; every call records ``start:<task>:<pod>``
in ``test:events`` (as ``handlers._record`` does) so a test sees it ran.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from tests.workers.handlers import _record


async def _cancel_own_subtask() -> None:
    sub = asyncio.create_task(asyncio.sleep(10))
    await asyncio.sleep(0)
    sub.cancel()
    await sub  # raises CancelledError here, in the handler: not the worker's doing


async def _ignore_cancellation(seconds: float) -> str:
    deadline = asyncio.get_running_loop().time() + seconds
    while (left := deadline - asyncio.get_running_loop().time()) > 0:
        with contextlib.suppress(asyncio.CancelledError):  # swallowed: the handler runs on
            await asyncio.sleep(left)
    return "finished anyway"


async def hostile(payload: dict[str, Any]) -> Any:
    await asyncio.to_thread(_record, "start")
    what = payload.get("do")
    if what == "cancel-self":
        await _cancel_own_subtask()
    elif what == "raise-cancelled":
        raise asyncio.CancelledError
    elif what == "exit":
        raise SystemExit(3)
    elif what == "interrupt":
        raise KeyboardInterrupt
    result = "ok"
    if what == "swallow-cancel":
        result = await _ignore_cancellation(float(payload.get("seconds", 2)))
    await asyncio.to_thread(_record, "end")
    return result
