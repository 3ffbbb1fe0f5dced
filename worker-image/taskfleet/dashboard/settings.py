"""What the dashboard was started with: one frozen value the app and the sampler read."""

from __future__ import annotations

from dataclasses import dataclass, field

from taskfleet.protocol.keys import validate_queue_name, validate_quota_name

#: Rows on one page of a state.
PAGE_SIZE = 50
#: The shortest actions token accepted: guessing it over HTTP must be hopeless.
MIN_TOKEN_CHARS = 16
#: The Host names answered without ``--allowed-host``: loopback only. A page on another
#: site that rebinds its own name to 127.0.0.1 (DNS rebinding) sends its own name.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
#: Addresses that mean "every interface": never a name a browser sends.
WILDCARD_ADDRESSES = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class DashboardSettings:
    """``queues`` empty: every queue the background discovery finds in this Redis.

    ``read_only`` (the default): the app changes nothing; it answers GET and HEAD, and
    every POST with 403. ``read_only=False`` enables the actions (retry, cancel, purge)
    for whoever logs in with ``token``, which is then required (``repr`` never shows it).
    """

    redis_url: str
    queues: tuple[str, ...] = ()
    #: provider quotas shown, besides those found with the queues (none are found when
    #: ``queues`` names them: nothing is scanned then)
    quotas: tuple[str, ...] = ()
    #: seconds between two live refreshes of an open page
    refresh_s: float = 2.0
    #: seconds between two samples of every queue's counters (the rate charts' step)
    sample_s: float = 5.0
    #: how far back the rate charts go
    history_s: float = 600.0
    #: seconds between two discoveries of the queues (only without ``queues``)
    discover_s: float = 60.0
    page_size: int = PAGE_SIZE
    #: live outputs (server-sent events) open at once; past it a new one gets 503
    max_streams: int = 16
    read_only: bool = True
    token: str | None = field(default=None, repr=False)
    #: Host header names answered (``host.allows``): exact names, ``*.domain`` for its
    #: subdomains, or ``*`` for any (no DNS-rebinding protection). Lowercase, no port.
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS

    def __post_init__(self) -> None:
        for name in self.queues:
            validate_queue_name(name)
        for name in self.quotas:
            validate_quota_name(name)
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
        for name in self.allowed_hosts:
            if not name or name != name.strip().lower() or any(c in name for c in "/ @,"):
                raise ValueError(f"allowed host {name!r} must be a lowercase name, no port")
        if not 1 <= self.max_streams <= 256:
            raise ValueError(f"max_streams must be within 1..256, not {self.max_streams!r}")
        if not 1 <= self.page_size <= 1000:
            raise ValueError(f"page_size must be within 1..1000, not {self.page_size!r}")


def host_name(header: str) -> str:
    """The name of a Host header: lowercase, without its port or an IPv6 literal's
    brackets, without a trailing dot ('' when it is not a plausible host)."""
    value = header.strip().lower()
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest[1:].isdigit()) or (rest and rest[0] != ":"):
            return ""
        return name
    name, _, port = value.partition(":")
    if port and not port.isdigit():
        return ""
    return name.removesuffix(".")


def allows(allowed: tuple[str, ...], header: str) -> bool:
    """Whether a request with this Host header is answered."""
    name = host_name(header)
    if not name:
        return False
    for pattern in allowed:
        if pattern in ("*", name):
            return True
        if pattern.startswith("*.") and name.endswith(pattern[1:]):
            return True
    return False


def with_bind_address(allowed: tuple[str, ...], host: str) -> tuple[str, ...]:
    """``allowed`` plus the address the server listens on, unless that is a wildcard."""
    name = host.strip().strip("[]").lower()
    if name in WILDCARD_ADDRESSES or name in allowed:
        return allowed
    return (*allowed, name)
