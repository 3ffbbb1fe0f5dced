"""What a running task writes besides its outcome: its checkpoint (its output chunks are
in ``output.py``).

``checkpoint`` stores a JSON state for the task's next attempt (``checkpoint.lua``),
fenced by the run's claim token like every write of a run. It is one round trip of its
own, not batched with progress: a handler checkpoints after a costly step and relies on
the state being stored when the call returns. The next claim of the task carries it in
its claim record, so a task that never checkpoints costs no read.

Protocol layer.
"""

from __future__ import annotations

import json
from typing import Any

from taskfleet.protocol import bounds
from taskfleet.protocol.errors import InvalidArgument, ProtocolError, StaleToken
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.scripts import Op
from taskfleet.protocol.signatures import Checkpoint

__all__ = ["checkpoint_op", "checkpoint_text"]


def checkpoint_text(state: Any) -> str:
    """The stored form of a checkpoint state: compact JSON; ValueError/TypeError naming
    what to fix when it is not JSON or larger than ``MAX_CHECKPOINT_BYTES``."""
    try:
        text = json.dumps(state, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"a checkpoint state must be JSON: {exc}") from None
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > bounds.MAX_CHECKPOINT_BYTES:
        raise ValueError(
            f"checkpoint state of {size} bytes exceeds MAX_CHECKPOINT_BYTES "
            f"({bounds.MAX_CHECKPOINT_BYTES}); store less, or a reference to it"
        )
    return text


def checkpoint_op(keys: QueueKeys, task_id: str, token: str, text: str, keep: bool) -> Op[None]:
    """Store ``text`` (``checkpoint_text``) as the task's checkpoint; ``StaleToken`` when
    the run no longer holds the task."""
    args = Checkpoint(task_id, token, text, 1 if keep else 0, bounds.MAX_CHECKPOINT_BYTES)

    def decode(raw: Any) -> None:
        if raw == 1:
            return
        if raw == 0:
            raise StaleToken(task_id)
        if raw == -1:
            raise InvalidArgument(
                f"checkpoint state exceeds MAX_CHECKPOINT_BYTES ({bounds.MAX_CHECKPOINT_BYTES})"
            )
        raise ProtocolError(f"checkpoint: unexpected reply {raw!r}")

    return Op("checkpoint", keys.script("checkpoint"), args, decode)
