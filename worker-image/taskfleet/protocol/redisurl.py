"""Redis URLs: parsed once, the way redis-py reads them, and shown only with secrets masked.

redis-py (``redis.connection.parse_url``) reads a URL's query with ``parse_qs``, which
percent-decodes keys and values, and hands every key to the connection as a keyword
argument: ``?pass%77ord=x`` is a password, ``?foo=1`` fails later with a ``TypeError``,
and a database path that is not a number (``redis://h/abc``) silently means database 0.
`parse_redis_url` reads a URL the same way and refuses whatever redis-py would misread or
reject late, with a one-line message that never quotes the URL; `redact_redis_url` is the
only form of a URL that may appear in output, logs, events or status.

Protocol layer: imports nothing of taskfleet but its errors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from taskfleet.protocol.errors import TaskfleetError

__all__ = [
    "CREDENTIAL_KEY_PATTERN",
    "CREDENTIAL_OPTIONS",
    "OPTIONS",
    "SCHEMES",
    "TASKFLEET_OPTIONS",
    "TLS_OPTIONS",
    "UNPARSEABLE",
    "InvalidRedisURL",
    "RedisURL",
    "is_credential_key",
    "parse_redis_url",
    "redact_redis_url",
    "scrub",
]

SCHEMES = ("redis", "rediss", "unix")
UNPARSEABLE = "<unparseable redis URL>"
MASK = "***"

# A query key that looks like it carries a secret, whatever its case: the CRD refuses
# such keys in redis.url and redaction masks their values. RE2 and Python's re agree on
# it, so the same text is used in the CRD's CEL rule.
CREDENTIAL_KEY_PATTERN = r"(?i:pass|pwd|secret|token|auth|cred)"
_CREDENTIAL_KEY = re.compile(CREDENTIAL_KEY_PATTERN)


def _boolean(value: str) -> str:
    # redis-py's to_bool takes anything not in its false list as true ("flase" is true).
    if value.lower() not in ("true", "false", "yes", "no", "1", "0", "y", "n", "t", "f"):
        raise ValueError("must be true or false")
    return value


def _number(
    low: float, high: float, *, integer: bool = False, open_low: bool = False
) -> Callable[[str], str]:
    """A number within ``low``..``high``, in ASCII digits only: ``int()`` and ``float()``
    also read other scripts' digits, ``_`` separators and spaces, which redis-py or
    Redis may read otherwise (or not at all)."""
    shape = _INTEGER if integer else _DECIMAL

    def check(value: str) -> str:
        if not shape.fullmatch(value):
            raise ValueError("must be " + ("a whole number" if integer else "a number"))
        number = int(value) if integer else float(value)
        if not math.isfinite(number) or number < low or (open_low and number == low):
            raise ValueError(f"must be {'above' if open_low else 'at least'} {low:g}")
        if number > high:
            raise ValueError(f"must be at most {int(high) if high == int(high) else high}")
        return value

    return check


_INTEGER = re.compile(r"-?[0-9]{1,20}")
_DECIMAL = re.compile(r"-?([0-9]{1,20}(\.[0-9]{0,20})?|\.[0-9]{1,20})")


def _choice(*choices: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value.lower() not in choices:
            raise ValueError("must be one of " + ", ".join(choices))
        return value

    return check


def _protocol(value: str) -> str:
    if value not in ("2", "3"):
        raise ValueError("must be 2 or 3")
    return value


def _text(value: str) -> str:
    return value


#: Bounds of the numeric query parameters: an hour for any timeout or interval, more
#: replicas than any deployment has, more connections than a server takes by default.
MAX_SOCKET_TIMEOUT_S = 3600
MAX_WAIT_REPLICAS = 1000
MAX_CONNECTIONS = 100_000

# Query parameters a taskfleet URL may carry (redis-py reads each as a connection option),
# with the check of their value. Anything else is refused: redis-py would pass it on as an
# unknown keyword argument and fail at the first connection.
OPTIONS: dict[str, Callable[[str], str]] = {
    "db": _number(0, 2**31 - 1, integer=True),
    "socket_timeout": _number(0, MAX_SOCKET_TIMEOUT_S, open_low=True),
    "socket_connect_timeout": _number(0, MAX_SOCKET_TIMEOUT_S, open_low=True),
    "socket_keepalive": _boolean,
    "retry_on_timeout": _boolean,
    "health_check_interval": _number(0, MAX_SOCKET_TIMEOUT_S, integer=True),
    "max_connections": _number(1, MAX_CONNECTIONS, integer=True),
    "client_name": _text,
    "protocol": _protocol,
}
# taskfleet's own query parameters (see `connect.py`, which strips them before redis-py
# reads the URL): ``cluster`` says the server is a Redis Cluster node to discover the
# cluster from; ``wait_replicas`` and ``wait_timeout_ms`` make enqueues and completions
# wait (WAIT) until that many replicas confirm the write, or the timeout passes.
TASKFLEET_OPTIONS: dict[str, Callable[[str], str]] = {
    "cluster": _boolean,
    "wait_replicas": _number(0, MAX_WAIT_REPLICAS, integer=True),
    "wait_timeout_ms": _number(0, MAX_SOCKET_TIMEOUT_S * 1000, integer=True),
}
OPTIONS.update(TASKFLEET_OPTIONS)
# Only for rediss:// (redis-py hands them to its TLS connection only).
TLS_OPTIONS: dict[str, Callable[[str], str]] = {
    "ssl_cert_reqs": _choice("none", "optional", "required"),
    "ssl_check_hostname": _boolean,
    "ssl_ca_certs": _text,
    "ssl_ca_path": _text,
    "ssl_certfile": _text,
    "ssl_keyfile": _text,
}
# Query parameters redis-py reads as credentials: allowed (a URL kept in a Secret may
# carry them), never shown.
CREDENTIAL_OPTIONS = ("username", "password", "ssl_password")
# socket_keepalive is an option of TCP connections only.
_NOT_FOR_UNIX = ("socket_keepalive",)

_HOST = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]+")
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}")
_SAFE_VALUE = re.compile(r"[A-Za-z0-9_.:/-]{0,200}")
_SAFE_HOSTPORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)?(:[0-9]{1,5})?")
_SAFE_PATH = re.compile(r"(/[A-Za-z0-9._~+-]*)*")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
# A secret shorter than this is not searched for in text: it would match everywhere.
_MIN_SECRET = 3


class InvalidRedisURL(TaskfleetError, ValueError):  # noqa: N818 - public name of the contract
    """A Redis URL taskfleet refuses; the message says what to fix and never quotes it."""


def is_credential_key(key: str) -> bool:
    """Whether a (decoded) query key names a credential or looks like it might."""
    return key in CREDENTIAL_OPTIONS or _CREDENTIAL_KEY.search(key) is not None


def _allowed(scheme: str) -> list[str]:
    names = [name for name in OPTIONS if not (scheme == "unix" and name in _NOT_FOR_UNIX)]
    if scheme == "rediss":
        names += list(TLS_OPTIONS)
    return [*names, *CREDENTIAL_OPTIONS]


def _key_shown(key: str) -> str:
    return repr(key) if _SAFE_NAME.fullmatch(key) else "with an unusual name"


@dataclass(frozen=True)
class RedisURL:
    """A Redis URL as redis-py reads it, checked. ``str()`` is the redacted form."""

    scheme: str
    host: str | None  # None for unix://
    port: int | None
    path: str | None  # the socket path of a unix:// URL
    db: int
    db_given: bool
    username: str | None
    password: str | None = field(repr=False)
    # Non-credential query parameters, decoded, in the URL's order.
    options: tuple[tuple[str, str], ...] = ()
    # Names of the credential query parameters the URL carries (values not kept here).
    credential_params: tuple[str, ...] = ()
    _secrets: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def has_credentials(self) -> bool:
        """A password in the userinfo or any credential in the query."""
        return bool(self.password) or bool(self.credential_params)

    def redacted(self) -> str:
        """The URL rebuilt from its parts with every credential replaced by ``***``."""
        userinfo = ""
        if self.username is not None or self.password is not None:
            user = quote(self.username or "", safe="") if self.username else ""
            userinfo = f"{user}:{MASK}@" if self.password is not None else f"{user}@"
        if self.scheme == "unix":
            location = f"{userinfo}{quote(self.path or '', safe='/')}"
        else:
            host = f"[{self.host}]" if self.host and ":" in self.host else (self.host or "")
            port = f":{self.port}" if self.port is not None else ""
            # The database as it was given: in the path (kept here) or as ?db= (an option).
            in_path = self.db_given and "db" not in dict(self.options)
            location = f"{userinfo}{host}{port}" + (f"/{self.db}" if in_path else "")
        query = [
            f"{quote(key, safe='_')}={quote(value, safe='_.:/-')}" for key, value in self.options
        ]
        query += [f"{key}={MASK}" for key in self.credential_params]
        return f"{self.scheme}://{location}" + ("?" + "&".join(query) if query else "")

    def __str__(self) -> str:
        return self.redacted()


def parse_redis_url(url: str) -> RedisURL:
    """Parse ``url`` as redis-py does and check every part; raise `InvalidRedisURL`.

    Checks: the scheme (redis, rediss, unix), the host and port (redis/rediss) or the
    socket path (unix), the database (the path of a redis URL or ``?db=``: a whole number
    from 0), no fragment, and each query parameter after percent-decoding its key and
    value exactly like redis-py: one of `OPTIONS` (`TLS_OPTIONS` with rediss) or
    `CREDENTIAL_OPTIONS`, given once, with a usable value. Messages never quote the URL,
    a value, or a key that does not look like a parameter name.
    """
    if not isinstance(url, str):
        raise InvalidRedisURL("a Redis URL must be a string")
    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise InvalidRedisURL(
            "a Redis URL must start with redis://, rediss:// or unix:// (lower case)"
        )
    # urlsplit silently deletes tabs and newlines (so would redis-py): "pass\nword" would
    # become "password". Refuse instead of guessing.
    if _CONTROL.search(url):
        raise InvalidRedisURL("a Redis URL must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
        hostname = parts.hostname
    except ValueError:
        raise InvalidRedisURL(
            "the Redis URL's host or port is malformed (the port must be a number from 1 "
            "to 65535; percent-encode @ : / ? # in a user name or password)"
        ) from None
    if parts.fragment or url.endswith("#"):
        raise InvalidRedisURL(
            "a Redis URL must not have a #fragment (percent-encode a # in a password as %23)"
        )
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    secrets = [s for s in (parts.password, password) if s]
    host: str | None = None
    path: str | None = None
    db: int | None = None
    if scheme == "unix":
        if hostname or port is not None:
            raise InvalidRedisURL(
                "a unix:// URL names a socket path, not a host: unix:///path/to/redis.sock"
            )
        path = unquote(parts.path)
        if not path.startswith("/") or path == "/":
            raise InvalidRedisURL("a unix:// URL needs an absolute socket path: unix:///path")
    else:
        if not hostname:
            raise InvalidRedisURL(f"the Redis URL names no host: {scheme}://HOST[:PORT][/DB]")
        host = unquote(hostname)
        if not _HOST.fullmatch(host):
            raise InvalidRedisURL("the Redis URL's host is not a host name or IP address")
        if port == 0:
            raise InvalidRedisURL("the Redis URL's port must be from 1 to 65535")
        if parts.path not in ("", "/"):
            match = re.fullmatch(r"/([0-9]{1,9})", parts.path)
            if match is None:
                raise InvalidRedisURL(
                    "the Redis URL's database (the path after the host) must be a whole "
                    f"number from 0, as in {scheme}://host:6379/0"
                )
            db = int(match.group(1))
    options: list[tuple[str, str]] = []
    credential_params: list[str] = []
    seen: set[str] = set()
    allowed = _allowed(scheme)
    # keep_blank_values: redis-py drops "?password=" silently; here it is an error.
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in seen:
            raise InvalidRedisURL(f"the Redis URL gives query parameter {_key_shown(key)} twice")
        seen.add(key)
        if key in CREDENTIAL_OPTIONS:
            if key == "password" and password is not None:
                raise InvalidRedisURL("the Redis URL gives a password twice (user info and query)")
            if key == "username" and username is not None:
                raise InvalidRedisURL("the Redis URL gives a user name twice (user info and query)")
            if not value:
                raise InvalidRedisURL(f"query parameter {key} of the Redis URL has no value")
            credential_params.append(key)
            secrets.append(value)
            continue
        if key not in allowed:
            if key in TLS_OPTIONS:
                raise InvalidRedisURL(f"query parameter {key} needs a rediss:// URL")
            credential = " (for a password redis-py reads only password=, in lower case)"
            raise InvalidRedisURL(
                f"unknown query parameter {_key_shown(key)} in the Redis URL"
                + (credential if is_credential_key(key) else "")
                + "; allowed: "
                + ", ".join(allowed)
            )
        check = OPTIONS.get(key) or TLS_OPTIONS[key]
        try:
            check(value)
        except ValueError as exc:
            raise InvalidRedisURL(f"query parameter {key} of the Redis URL {exc}") from None
        options.append((key, value))
    _check_taskfleet_options(scheme, dict(options), db)
    query_db = dict(options).get("db")
    if query_db is not None and db is not None:
        raise InvalidRedisURL("the Redis URL names the database twice (path and ?db=)")
    given = db if db is not None else (int(query_db) if query_db is not None else None)
    secrets += [unquote(s) for s in secrets]  # what an older redis-py decoded twice
    return RedisURL(
        scheme=scheme,
        host=host,
        port=port,
        path=path,
        db=given or 0,
        db_given=given is not None,
        username=username,
        password=password,
        options=tuple(options),
        credential_params=tuple(credential_params),
        _secrets=tuple(dict.fromkeys(secrets)),
    )


def _check_taskfleet_options(scheme: str, options: dict[str, str], db: int | None) -> None:
    cluster = options.get("cluster", "false").lower() in ("true", "yes", "1", "y", "t")
    if cluster and scheme == "unix":
        raise InvalidRedisURL("cluster=true needs a redis:// or rediss:// URL, not unix://")
    if cluster and ((db or 0) != 0 or int(options.get("db", "0")) != 0):
        raise InvalidRedisURL("a Redis Cluster has database 0 only: drop the database or use /0")
    if "wait_timeout_ms" in options and "wait_replicas" not in options:
        raise InvalidRedisURL("query parameter wait_timeout_ms needs wait_replicas")


def _secrets_loosely(url: str) -> list[str]:
    """Every string of ``url`` that may be a secret, raw and decoded, without parsing it."""
    found: list[str] = []
    rest = url.partition("://")[2]
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    # The user info as urlsplit sees it, and as far as the last @ (an unencoded / ? or #
    # in a password cuts the first one short).
    for userinfo in (authority.rpartition("@")[0], rest.rpartition("@")[0]):
        if ":" in userinfo:
            found.append(userinfo.partition(":")[2])
    query = rest.partition("?")[2]
    for field_ in re.split(r"[&;#]", query):
        key, _, value = field_.partition("=")
        if value and not (
            unquote(key.replace("+", " ")) in OPTIONS and _SAFE_VALUE.fullmatch(value)
        ):
            found.append(value)
    found += [unquote(s) for s in found] + [unquote(s.replace("+", " ")) for s in found]
    return [s for s in dict.fromkeys(found) if len(s) >= _MIN_SECRET]


def _redact_loosely(url: str) -> str:
    """A URL `parse_redis_url` refuses, with everything that might be secret masked."""
    scheme, sep, _ = url.partition("://")
    if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]{0,15}", scheme):
        return UNPARSEABLE
    if _CONTROL.search(url):
        return UNPARSEABLE
    parts = urlsplit(url)
    if "@" in parts.path or "@" in parts.query or "@" in parts.fragment:
        return UNPARSEABLE  # an unencoded / ? or # cut the user info short
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not _SAFE_HOSTPORT.fullmatch(hostport):
        return UNPARSEABLE
    user, colon, _ = userinfo.partition(":")
    if user and not _SAFE_NAME.fullmatch(user):
        user = MASK
    netloc = (f"{user}{':' + MASK if colon else ''}@" if at else "") + hostport
    path = parts.path if _SAFE_PATH.fullmatch(parts.path) else "/" + MASK
    fields = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        shown_key = key if _SAFE_NAME.fullmatch(key) else MASK
        safe = key in OPTIONS and not is_credential_key(key) and _SAFE_VALUE.fullmatch(value)
        fields.append(f"{shown_key}={value if safe else MASK}")
    query = "?" + "&".join(fields) if fields else ""
    fragment = "#" + MASK if parts.fragment else ""
    return f"{scheme}://{netloc}{path}{query}{fragment}"


def redact_redis_url(url: str) -> str:
    """``url`` with its password and every credential query parameter masked; never raises.

    A URL `parse_redis_url` accepts is rebuilt from its parts (``redis://:***@host:6379/0``);
    one it refuses is shown with every part that might hold a secret masked, or as
    ``<unparseable redis URL>``. Whatever happens, no secret of the URL (raw, or
    percent-decoded as redis-py would) appears in the result.
    """
    try:
        try:
            parsed = parse_redis_url(url)
        except InvalidRedisURL:
            shown = _redact_loosely(url)
            secrets: Iterable[str] = _secrets_loosely(url)
        else:
            shown = parsed.redacted()
            secrets = [s for s in parsed._secrets if len(s) >= _MIN_SECRET]
        if any(secret in shown for secret in secrets):
            return UNPARSEABLE
        return shown
    except Exception:  # never raise: this runs inside error handling
        return UNPARSEABLE


def scrub(text: str, url: str | None = None) -> str:
    """``text`` (an error message) with the secrets of ``url`` and any URL in it masked."""
    if url:
        try:
            secrets = sorted(_secrets_loosely(url), key=len, reverse=True)
        except Exception:
            secrets = []
        for secret in secrets:
            text = text.replace(secret, MASK)
    return " ".join(redact_redis_url(word) if "://" in word else word for word in text.split(" "))
