"""Task names: which of a worker's handlers runs a task (``enqueue(..., task="resize")``).

A name is stored on the task (hash field ``name``, absent when none) and travels in its
claim record. One pattern, here, for the producer's check, the worker's ``--handler
NAME=REF`` and the TaskQueue's CEL rule.
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
