"""Processes a handler started end with the worker that ran it.

A handler may fork (``subprocess``, ``multiprocessing``, a library's helper) and leave
the process running, even one that ignores SIGTERM: when the worker exits it would
become an orphan that nobody stops. So at exit the worker SIGKILLs every descendant it
still has (children, their children, ...; found in /proc) and reaps its children.

Not adopted: a process whose parent already exited while the worker ran (a double fork,
a daemon) belongs to init by then. Making the worker a child subreaper
(``PR_SET_CHILD_SUBREAPER``) would adopt those, but the worker would then have to reap
them while it runs, and a ``waitpid`` of its own would steal the exit status of a
handler's ``subprocess`` (see ``reaper``). When the worker is PID 1 of its container the
kernel ends every process left in it anyway. Linux only (/proc); elsewhere nothing is
done.
"""

from __future__ import annotations

import contextlib
import os
import signal

__all__ = ["end_children"]

#: Rounds of looking for descendants at exit (one forking while we kill its parent).
MAX_ROUNDS = 5


def end_children() -> int:
    """SIGKILL every descendant of this process and reap its children; returns how many
    were ended."""
    me = os.getpid()
    ended = 0
    for _ in range(MAX_ROUNDS):
        found = _descendants_of(me)
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for pid in found:
            with contextlib.suppress(ChildProcessError):  # not ours to reap: a grandchild
                os.waitpid(pid, 0)
        ended += len(found)
    return ended


def _descendants_of(root: int) -> list[int]:
    parents = _parents()
    found: list[int] = []
    level = [root]
    while level:
        level = [pid for pid, parent in parents.items() if parent in level]
        found += level
    return found


def _parents() -> dict[int, int]:
    """Every process's parent, from /proc (empty where there is none)."""
    parents = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    text = stat.read()
            except OSError:
                continue  # gone meanwhile
            # "pid (comm) state ppid ...": comm may hold spaces and ')'
            fields = text[text.rfind(b")") + 2 :].split()
            if len(fields) > 1:
                parents[int(entry.name)] = int(fields[1])
    return parents
