"""Whether this replica leads: the one kopf's peering lets work (docs/operator.md, "Two
replicas"), exported as ``taskfleet_operator_leader`` (1 or 0) so an alert sees when no
replica does.

kopf tells no handler "paused" or "resumed"; what it does, through its public API, is
run handlers only while the replica is not paused. So the replica watches its own
ClusterKopfPeering object (`seen` is called for each event of it, which every peer's
keep-alive makes at least once per lifetime): an event within `lead_timeout_s` means
its handlers run, and it leads. A sweep daemon stopped with kopf's
``OPERATOR_PAUSING`` reason (`paused`) says so at once. Standalone, it always leads.
"""

from __future__ import annotations

import threading
import time

__all__ = ["Leadership"]


class Leadership:
    """Read at each scrape (`leads`); ``standalone``: no peering, always leads."""

    def __init__(self, *, standalone: bool, lifetime_s: float) -> None:
        self.standalone = standalone
        # Keep-alives come every lifetime minus 5-10 s from each peer: two lifetimes
        # without any event means this replica's watches are paused.
        self.lead_timeout_s = 2 * lifetime_s
        self._lock = threading.Lock()
        self._seen: float | None = None

    def seen(self) -> None:
        """kopf handed this replica an event: its watches run."""
        with self._lock:
            self._seen = time.monotonic()

    def paused(self) -> None:
        """kopf stopped a daemon of this replica because it pauses for another."""
        with self._lock:
            self._seen = None

    def leads(self) -> bool:
        if self.standalone:
            return True
        with self._lock:
            seen = self._seen
        return seen is not None and time.monotonic() - seen < self.lead_timeout_s
