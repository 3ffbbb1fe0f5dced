"""Redis URLs: one parser that reads them as redis-py does, one redaction, used everywhere.

The hostile table is the same for every layer: the parser, the redaction, the CLI, the
operator's spec model (the CRD's own rules are checked in test_crd_apiserver.py).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.connection import parse_url
from taskfleet.protocol.redisurl import (
    UNPARSEABLE,
    InvalidRedisURL,
    parse_redis_url,
    redact_redis_url,
    scrub,
)
from taskfleet_operator import connections, reconcile

from tests.cli_output import assert_one_line_error
from tests.fixtures_redis import RedisServerFactory
from tests.workers.harness import env_for, taskfleet

SECRET = "Zq7-sEcReT-9x"  # no character a URL would encode

# (url, what redis-py would do with it) for URLs that carry SECRET as a credential and
# that taskfleet accepts: the parser must find the same password redis-py does.
CREDENTIAL_URLS = [
    f"redis://host/0?password={SECRET}",
    f"redis://host/0?pass%77ord={SECRET}",  # the key, percent-encoded
    f"redis://host/0?%70%61%73%73%77%6F%72%64={quote(SECRET, safe='')}",
    f"redis://host/0?password={''.join(f'%{ord(c):02X}' for c in SECRET)}",  # the value too
    f"redis://:{SECRET}@host:6379/0",
    f"redis://user:{SECRET}@host:6379/0",
    f"unix:///run/redis.sock?password={SECRET}&db=2",
    f"unix://:{SECRET}@/run/redis.sock",
]
# A password with the characters a URL must encode in the user info.
AWKWARD = "p@ss:w/rd?#&="
AWKWARD_URL = f"redis://user:{quote(AWKWARD, safe='')}@host:6380/3"

# URLs taskfleet refuses, with the words the one-line error must contain.
REFUSED = [
    ("redis://host/abc", "database"),
    ("redis://host/-1", "database"),
    ("redis://host/0/1", "database"),
    ("redis://host/0?foo=bar", "unknown query parameter 'foo'"),
    ("redis://host/0?cluster_mode=true", "unknown query parameter 'cluster_mode'"),
    ("redis://host/1?cluster=true", "database 0 only"),
    ("unix:///tmp/r.sock?cluster=true", "needs a redis:// or rediss:// URL"),
    (
        "redis://host/0?cluster=maybe",
        "query parameter cluster of the Redis URL must be true or false",
    ),
    ("redis://host/0?wait_replicas=-1", "wait_replicas of the Redis URL must be at least 0"),
    ("redis://host/0?wait_timeout_ms=10", "wait_timeout_ms needs wait_replicas"),
    ("redis://host/0?wait_replicas=99999999999999999999", "wait_replicas of the Redis URL must"),
    ("redis://host/0?wait_replicas=1&wait_timeout_ms=3600001", "must be at most 3600000"),
    ("redis://host/0?max_connections=1e9", "must be a whole number"),
    ("redis://host/0?socket_timeout=1_0", "socket_timeout of the Redis URL must be a number"),
    ("redis://host/0?health_check_interval=\u0661", "must be a whole number"),
    ("redis://host/0?socket_connect_timeout=%201", "socket_connect_timeout"),
    (f"redis://host/0?PASSWORD={SECRET}", "only password="),
    (f"redis://host/0?Pass%77ord={SECRET}", "unknown query parameter 'Password'"),
    (f"redis://host/0?password={SECRET}&pass%77ord=x", "twice"),
    (f"redis://:{SECRET}@host/0?password=other", "password twice"),
    ("redis://host/0?db=1", "database twice"),
    ("redis://host/0?password=", "no value"),
    ("redis://host/0?socket_timeout=nan", "socket_timeout"),
    ("redis://host/0?retry_on_timeout=flase", "true or false"),
    ("redis://host/0?ssl_cert_reqs=none", "needs a rediss://"),
    ("unix:///run/redis.sock?socket_keepalive=true", "unknown query parameter"),
    ("redis://host:0/0", "port"),
    (f"redis://:{SECRET}@host:notaport/0", "port"),
    (f"redis://:{SECRET}@host:99999/0", "port"),
    ("redis:///0", "no host"),
    ("unix://host/run/redis.sock", "socket path"),
    ("unix://", "socket path"),
    ("http://host/0", "must start with redis://"),
    ("REDIS://host/0", "must start with redis://"),
    ("redis://host/0#x", "fragment"),
    ("redis://host/0?pass\nword=x", "control characters"),
]


@pytest.mark.parametrize("url", CREDENTIAL_URLS)
def test_a_password_is_found_wherever_redis_py_would_read_one(url: str) -> None:
    parsed = parse_redis_url(url)

    assert parsed.has_credentials
    assert parsed.password == SECRET or parse_url(url)["password"] == SECRET  # type: ignore[no-untyped-call]
    assert parse_url(url)["password"] == SECRET  # type: ignore[no-untyped-call]
    assert SECRET not in repr(parsed) and SECRET not in str(parsed)


def test_a_percent_encoded_password_in_the_user_info_is_decoded_like_redis_py_does() -> None:
    parsed = parse_redis_url(AWKWARD_URL)

    assert (parsed.username, parsed.password) == ("user", AWKWARD)
    assert parse_url(AWKWARD_URL)["password"] == AWKWARD  # type: ignore[no-untyped-call]
    assert (parsed.host, parsed.port, parsed.db) == ("host", 6380, 3)
    assert str(parsed) == "redis://user:***@host:6380/3"


@pytest.mark.parametrize(
    ("url", "host", "port", "db"),
    [
        ("redis://localhost:6379/0", "localhost", 6379, 0),
        ("redis://redis.taskfleet-system.svc", "redis.taskfleet-system.svc", None, 0),
        ("redis://h/", "h", None, 0),
        ("rediss://h:6380/15?ssl_cert_reqs=none", "h", 6380, 15),
        ("redis://h?db=7", "h", None, 7),
        ("redis://[::1]:6379/2", "::1", 6379, 2),
    ],
)
def test_a_usable_url_parses_to_what_redis_py_connects_to(
    url: str, host: str, port: int | None, db: int
) -> None:
    parsed = parse_redis_url(url)
    kwargs = parse_url(url)  # type: ignore[no-untyped-call]

    assert (parsed.host, parsed.port, parsed.db) == (host, port, db)
    assert kwargs.get("host") == host and kwargs.get("port") == port
    assert kwargs.get("db", 0) == db
    assert not parsed.has_credentials


@pytest.mark.parametrize(("url", "expected"), REFUSED)
def test_a_url_redis_py_would_misread_or_refuse_late_is_refused_with_a_clear_message(
    url: str, expected: str
) -> None:
    with pytest.raises(InvalidRedisURL) as raised:
        parse_redis_url(url)

    message = str(raised.value)
    assert expected in message
    assert "\n" not in message
    assert SECRET not in message
    assert isinstance(raised.value, ValueError)


def test_an_unknown_query_parameter_error_lists_the_allowed_ones() -> None:
    with pytest.raises(InvalidRedisURL, match=r"allowed: db, socket_timeout, .*password"):
        parse_redis_url("redis://host/0?foo=bar")


@pytest.mark.parametrize(
    "url", [*CREDENTIAL_URLS, AWKWARD_URL, *(url for url, _ in REFUSED if SECRET in url)]
)
def test_redaction_never_shows_the_secret_in_any_encoding(url: str) -> None:
    shown = redact_redis_url(url)

    for secret in (SECRET, AWKWARD, quote(AWKWARD, safe="")):
        assert secret not in shown
    assert shown.startswith(("redis://", "unix://")) or shown == UNPARSEABLE


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        (f"redis://h/0?pass%77ord={SECRET}", "redis://h/0?password=***"),
        (f"redis://h/0?PASSWORD={SECRET}", "redis://h/0?PASSWORD=***"),
        (f"redis://h/0?mypassword={SECRET}", "redis://h/0?mypassword=***"),
        (f"redis://h/0?foo={SECRET}", "redis://h/0?foo=***"),
        ("redis://h/abc", "redis://h/abc"),
        (f"unix://:{SECRET}@/run/redis.sock?db=1", "unix://:***@/run/redis.sock?db=1"),
        ("not a url", UNPARSEABLE),
        (f"redis://:{SECRET[:4]}/{SECRET[4:]}@h/0", UNPARSEABLE),  # an unencoded / in it
    ],
)
def test_redaction_keeps_what_helps_and_masks_what_might_be_secret(url: str, shown: str) -> None:
    assert redact_redis_url(url) == shown


# Where a secret can hide in a URL redis-py reads, in the encodings it decodes.
POSITIONS = [
    "redis://:{q}@h:6379/0",
    "redis://user:{q}@h/1",
    "redis://:{raw}@h:6379/0",
    "rediss://u:{q}@h/0?ssl_cert_reqs=none",
    "redis://h/0?password={q}",
    "redis://h/0?password={qp}",
    "redis://h/0?pass%77ord={q}",
    "redis://h/0?%50ASSWORD={q}",
    "redis://h/0?db=1&PassWord={raw}",
    "redis://h/0?token={raw}&x=1",
    "unix:///run/r.sock?password={q}",
    "unix://:{q}@/run/r.sock?db=2",
    "redis://h/0?socket_timeout=1&password={raw}",
]


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(
        st.characters(min_codepoint=0x21, max_codepoint=0x2FF, exclude_characters="\x7f"),
        min_size=8,
        max_size=40,
    ),
    position=st.sampled_from(POSITIONS),
)
def test_no_secret_survives_redaction_wherever_and_however_it_is_written(
    secret: str, position: str
) -> None:
    url = position.format(raw=secret, q=quote(secret, safe=""), qp=quote_plus(secret))
    shown = redact_redis_url(url)

    scrubbed = scrub(f"cannot connect to {url}: refused", url)
    for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
        assert form not in shown
        assert form not in scrubbed


def test_redaction_never_raises_whatever_it_is_given() -> None:
    for junk in ("", "://", "redis://[", "redis://h:99999999999", "\x00", "redis://" + "%" * 50):
        assert isinstance(redact_redis_url(junk), str)


def test_the_operator_masks_the_same_way() -> None:
    url = f"redis://h/0?pass%77ord={SECRET}"
    error = redis.AuthenticationError(f"bad password {SECRET} for {url}")

    assert SECRET not in connections.describe_error(error, url)
    assert "AuthenticationError" in connections.describe_error(error, url)


@pytest.mark.parametrize("url", [*CREDENTIAL_URLS, AWKWARD_URL])
def test_a_taskqueue_url_with_a_credential_anywhere_is_an_invalid_spec_that_does_not_quote_it(
    url: str,
) -> None:
    spec = {"image": "w", "handler": "m:f", "redis": {"url": url}}

    with pytest.raises(reconcile.InvalidSpec) as raised:
        reconcile.parse_spec(spec)

    message = str(raised.value)
    assert "redis.secretRef" in message or "password" in message
    for secret in (SECRET, AWKWARD, quote(AWKWARD, safe="")):
        assert secret not in message


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://h/abc", "database"),
        ("redis://h/0?foo=bar", "allowed"),
        ("redis://h/0?clustered=true", "allowed"),
        ("redis://h/0?db=%31", "percent-encode"),
        ("redis://h/0?PASSWORD=x", "redis.secretRef"),
        ("redis://h/0?p%61ssword=x", "percent-encode"),
    ],
)
def test_a_taskqueue_url_the_parser_refuses_is_an_invalid_spec(url: str, expected: str) -> None:
    spec = {"image": "w", "handler": "m:f", "redis": {"url": url}}

    with pytest.raises(reconcile.InvalidSpec, match=expected):
        reconcile.parse_spec(spec)


# ----------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize(("url", "expected"), REFUSED)
def test_the_cli_refuses_a_bad_url_with_one_line_and_exit_2_never_showing_the_secret(
    url: str, expected: str, redis_url: str, tmp_path: Path
) -> None:
    result = taskfleet("stats", "q", "--redis-url", url, env=env_for(redis_url, tmp_path))

    assert result.returncode == 2, result.stderr
    line = assert_one_line_error(result.stderr)
    assert expected in line
    assert SECRET not in result.stderr + result.stdout


def test_stats_authenticates_with_a_percent_encoded_password_key_and_never_prints_it(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    server = redis_server_factory(persistent=False)
    with redis.Redis(host="127.0.0.1", port=server.port) as admin:
        admin.config_set("requirepass", SECRET)
    base = f"redis://127.0.0.1:{server.port}/0"

    good = taskfleet(
        "stats", "q", "--redis-url", f"{base}?pass%77ord={SECRET}", env=env_for(base, tmp_path)
    )
    wrong = taskfleet(
        "stats", "q", "--redis-url", f"{base}?pass%77ord=not-{SECRET}", env=env_for(base, tmp_path)
    )
    in_env = taskfleet("stats", "q", env=env_for(f"{base}?password=not-{SECRET}", tmp_path))

    assert good.returncode == 0, good.stderr
    assert "pending" in good.stdout
    for result in (wrong, in_env):
        assert result.returncode == 2, result.stderr  # refused credentials: bad configuration
        line = assert_one_line_error(result.stderr)
        assert "password=***" in line
    for result in (good, wrong, in_env):
        assert SECRET not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "url", ["redis://localhost:6379/0?foo=bar", "redis://localhost/abc", "redis://:s3cret@h/0?x=1"]
)
def test_the_library_refuses_a_url_redis_py_would_misread_before_it_connects(url: str) -> None:
    """``Queue`` and the worker's settings parse a URL first: a clear error, not a
    ``TypeError`` from deep inside redis-py at the first call."""
    from taskfleet import Queue
    from taskfleet.worker import WorkerSettings

    with pytest.raises(InvalidRedisURL) as queue_error:
        Queue("q", redis_url=url)
    settings = WorkerSettings(queue="q", redis_url=url, pod="p", incarnation="i")
    with pytest.raises(InvalidRedisURL) as worker_error:
        settings.validate()
    for error in (queue_error, worker_error):
        assert "s3cret" not in str(error.value)


def test_an_enqueue_with_a_url_option_out_of_bounds_stores_nothing(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """The URL is checked before anything is written: a wait_replicas no deployment can
    have used to store the task and then report the failed WAIT."""
    url = redis_url + "?wait_replicas=99999999999999999999"
    result = taskfleet("enqueue", "q", "--redis-url", url, env=env_for(redis_url, tmp_path))
    assert result.returncode == 2, result.stderr
    assert "wait_replicas" in assert_one_line_error(result.stderr)
    assert redis_client.dbsize() == 0
