"""Who may act: the token, the sessions it opens, and the checks every POST passes.

The token is entered once, on the login page; a good one opens a session: a random id in
an HttpOnly, SameSite=Strict cookie (scripts cannot read it, other sites' requests do
not carry it) and a CSRF token of its own, which every action's form sends back. A POST
is refused unless its Origin (or Sec-Fetch-Site) says it comes from this dashboard, its
cookie names a live session and its CSRF token is that session's. Every comparison with
a secret is constant-time (``hmac.compare_digest``). Sessions live in this process: a
restart logs everyone out, which is what rotating the token wants anyway.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from starlette.requests import Request

#: The session cookie's name.
COOKIE = "taskfleet_session"
#: How long a session lasts after its login.
SESSION_S = 12 * 3600
#: Sessions kept at most; the oldest go first (each login adds one).
MAX_SESSIONS = 1000


@dataclass(frozen=True)
class Session:
    id: str
    csrf: str
    expires: float


def token_matches(expected: str, given: str) -> bool:
    """Constant-time, and blind to the length of either: their digests are compared."""
    want = hashlib.sha256(expected.encode()).digest()
    return hmac.compare_digest(want, hashlib.sha256(given.encode()).digest())


class Sessions:
    """The open sessions, by id; thread-safe (handlers run on a thread pool)."""

    def __init__(self, lifetime_s: float = SESSION_S) -> None:
        self._lifetime_s = lifetime_s
        self._lock = threading.Lock()
        self._open: OrderedDict[str, Session] = OrderedDict()

    def open(self) -> Session:
        session = Session(
            secrets.token_urlsafe(32), secrets.token_urlsafe(32), time.time() + self._lifetime_s
        )
        with self._lock:
            self._open[session.id] = session
            while len(self._open) > MAX_SESSIONS:
                self._open.popitem(last=False)
        return session

    def find(self, session_id: str | None) -> Session | None:
        """The live session of this id. A dict lookup by the id itself: the id is 256
        random bits, so timing the lookup tells nothing usable about another one."""
        if not session_id:
            return None
        with self._lock:
            session = self._open.get(session_id)
            if session is not None and session.expires <= time.time():
                del self._open[session_id]
                session = None
        return session

    def close(self, session_id: str | None) -> None:
        with self._lock:
            self._open.pop(session_id or "", None)


def of(request: Request, sessions: Sessions) -> Session | None:
    return sessions.find(request.cookies.get(COOKIE))


def same_origin(request: Request) -> bool:
    """Whether the browser says this request comes from a page of this dashboard.

    ``Sec-Fetch-Site`` when the browser sends it (every current one does): ``same-origin``
    or ``none`` (typed by the user). Else ``Origin``, which must be this host. A client
    sending neither (curl, an old browser) passes this check: the SameSite cookie and the
    CSRF token still stand in its way.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


def csrf_matches(session: Session, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(session.csrf.encode(), given.encode())
