"""What the dashboard was started with: one frozen value the app and the sampler read."""

from __future__ import annotations

from dataclasses import dataclass, field

from taskfleet.protocol.keys import validate_queue_name

#: Rows on one page of a state.
PAGE_SIZE = 50
#: The shortest actions token accepted: guessing it over HTTP must be hopeless.
MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class DashboardSettings:
    """``queues`` empty: every queue the background discovery finds in this Redis.

    ``read_only`` (the default): the app changes nothing; it answers GET and HEAD, and
    every POST with 403. ``read_only=False`` enables the actions (retry, cancel, purge)
    for whoever logs in with ``token``, which is then required (``repr`` never shows it).
    """

    redis_url: str
    queues: tuple[str, ...] = ()
    #: seconds between two live refreshes of an open page
    refresh_s: float = 2.0
    #: seconds between two samples of every queue's counters (the rate charts' step)
    sample_s: float = 5.0
    #: how far back the rate charts go
    history_s: float = 600.0
    #: seconds between two discoveries of the queues (only without ``queues``)
    discover_s: float = 60.0
    page_size: int = PAGE_SIZE
    read_only: bool = True
    token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name in self.queues:
            validate_queue_name(name)
        if not self.read_only and (self.token is None or len(self.token) < MIN_TOKEN_CHARS):
            raise ValueError(
                f"actions need a token of at least {MIN_TOKEN_CHARS} characters "
                "(TASKFLEET_DASHBOARD_TOKEN or --token-file)"
            )
        for what, value in (
            ("refresh_s", self.refresh_s),
            ("sample_s", self.sample_s),
            ("history_s", self.history_s),
            ("discover_s", self.discover_s),
        ):
            if not 0 < value <= 86400:
                raise ValueError(f"{what} must be within 0..86400 seconds, not {value!r}")
        if not 1 <= self.page_size <= 1000:
            raise ValueError(f"page_size must be within 1..1000, not {self.page_size!r}")
