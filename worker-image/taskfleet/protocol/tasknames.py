"""Task names: which of a worker's handlers runs a task (``enqueue(..., task="resize")``).

A named task's payload is stored as ``\\x01<name>\\x01<JSON>`` (``named_payload``), and goes
so in its claim record: a task without a name is stored and claimed exactly as before,
and a worker too old to know names fails a named task as a bad payload (no JSON starts
with ``\\x01``) instead of running it with its one handler, whichever script claimed it.
One pattern, here, for the producer's check, the worker's ``--handler NAME=REF`` and the
TaskQueue's CEL rule.
"""

from __future__ import annotations

import re

#: Letters, digits and ``_ . / -``, starting with a letter or digit, at most 100: a name
#: reads the same in a manifest, a log line and a claim record (no NUL, no \1, no '=').
PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,99}$"
_NAME = re.compile(PATTERN)


def valid_task_name(name: object) -> bool:
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def task_name_problem(name: object) -> str | None:
    """Why ``name`` is no task name (one line), or None when it is one."""
    if valid_task_name(name):
        return None
    shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:60] + "..."
    return (
        f"task name {shown} must be 1-100 letters, digits, '_', '.', '/' or '-', "
        "starting with a letter or digit"
    )


#: Opens and closes the name ahead of a named task's payload.
MARK = "\x01"


def named_payload(name: str, payload: str) -> str:
    """A named task's stored payload: its name ahead of the JSON text."""
    return f"{MARK}{name}{MARK}{payload}"


def split_named(stored: str) -> tuple[str | None, str]:
    """``(name, JSON text)`` of a stored payload; name None when it has none."""
    if not stored.startswith(MARK):
        return None, stored
    name, _, payload = stored[1:].partition(MARK)
    return name, payload
