"""A minimal init for when the worker is PID 1 of its container.

PID 1 inherits every orphaned process in the PID namespace and must reap it, or zombies
pile up. Reaping inside the worker process itself is unsafe: ``waitpid(-1)`` would also
collect children the handlers wait on through ``subprocess``, which then report exit
status 0 whatever really happened (``Popen.wait`` swallows ECHILD). So, like tini, PID 1
forks: the parent stays a tiny init that reaps every child and forwards signals, and the
child runs the worker with ordinary child-reaping semantics. The parent exits with the
worker's exit code, which ends the container.

The fork happens before the worker starts any thread or event loop, and signals are
blocked around it so one sent in that instant is delivered to the worker, not lost.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType

__all__ = ["FORWARDED_SIGNALS", "run_as_init"]

#: Signals PID 1 passes on to the worker; SIGKILL/SIGSTOP can't be caught, SIGCHLD is ours.
FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def run_as_init() -> None:
    """Fork when we are PID 1; returns in the child (the worker), never in the parent."""
    if os.getpid() != 1:
        return
    blocked = set(FORWARDED_SIGNALS)
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    child = os.fork()
    if child == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        return

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_reap_until(child))


def _reap_until(child: int) -> int:
    """Reap every process that ends here; return the worker's exit code when it ends."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)  # EINTR from forwarded signals is retried (PEP 475)
        except ChildProcessError:
            return 1  # the worker vanished without us seeing its status: report a failure
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            # A worker killed by a signal exits like a shell reports it: 128 + signal number.
            return code if code >= 0 else 128 - code
