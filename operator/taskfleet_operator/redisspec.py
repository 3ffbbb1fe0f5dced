"""`spec.redis` of a TaskQueue: a URL without a password, or a Secret holding the URL.

The URL's rules appear twice, as CEL (so ``kubectl apply`` refuses a bad URL with a
message saying what to fix) and in `_check_url` (the same rules, then the URL parser the
CLI and the worker use), and never put the URL itself in a message.
"""

from __future__ import annotations

import re

from pydantic import ConfigDict, Field, model_validator
from taskfleet.protocol.redisurl import (
    CREDENTIAL_KEY_PATTERN,
    OPTIONS,
    TLS_OPTIONS,
    InvalidRedisURL,
    parse_redis_url,
)

from taskfleet_operator.modelbase import CamelModel, cel

REDIS_URL_PATTERN = r"^(redis|rediss|unix)://"
# A userinfo part with a colon ("user:pass@" or ":pass@") carries a password.
_PASSWORD_IN_URL = re.compile(r"^[a-z]+://[^@/]*:[^@/]*@")
# redis-py percent-decodes query keys and values (?pass%77ord= is a password): no % at all
# in redis.url's query, and no key that looks like a credential, in any case.
PERCENT_IN_QUERY = r"[?].*%"
CREDENTIAL_IN_QUERY = r"[?&][^=&#]*" + CREDENTIAL_KEY_PATTERN
_CREDENTIAL_IN_QUERY = re.compile(CREDENTIAL_IN_QUERY)
# The query may only hold parameters taskfleet's URL parser accepts (RE2 and re agree).
_QUERY_KEYS = "|".join([*OPTIONS, *TLS_OPTIONS])
KNOWN_QUERY = rf"^[^?#]*([?]({_QUERY_KEYS})=[^&#]*(&({_QUERY_KEYS})=[^&#]*)*)?$"
# A redis:// or rediss:// URL's path is the database number, nothing else.
DB_PATH = r"^rediss?://[^/?#]*(/[0-9]*)?([?#].*)?$"
PASSWORD_MESSAGE = (
    "redis.url must not contain a password: put the URL in a Secret and use redis.secretRef"
)
QUERY_CREDENTIAL_MESSAGE = (
    "redis.url must not carry a credential in its query (a key like password, token or "
    "secret, in any case): put the URL in a Secret and use redis.secretRef"
)
PERCENT_MESSAGE = (
    "redis.url must not percent-encode its query (no %): write the options plainly, and "
    "put credentials in a Secret (redis.secretRef)"
)
KNOWN_QUERY_MESSAGE = (
    "redis.url has a query parameter taskfleet does not accept; allowed: "
    + ", ".join([*OPTIONS, *TLS_OPTIONS])
    + " (key=value pairs joined by &)"
)
DB_PATH_MESSAGE = (
    "the database in redis.url (the path after the host) must be a whole number, as in "
    "redis://host:6379/0"
)


class SecretKeyRef(CamelModel):
    """A key of a Secret in the TaskQueue's namespace holding the full Redis URL."""

    name: str = Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    key: str = Field(default="url", min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")


class RedisRef(CamelModel):
    """Where the queue lives: a URL without a password, or a Secret holding the URL."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "has(self.url) != has(self.secretRef)",
                    "set exactly one of redis.url or redis.secretRef",
                ),
                cel(
                    "!has(self.url) || !self.url.matches('^[a-z]+://[^@/]*:[^@/]*@')",
                    PASSWORD_MESSAGE,
                ),
                cel(f"!has(self.url) || !self.url.matches('{PERCENT_IN_QUERY}')", PERCENT_MESSAGE),
                cel(
                    f"!has(self.url) || !self.url.matches('{CREDENTIAL_IN_QUERY}')",
                    QUERY_CREDENTIAL_MESSAGE,
                ),
                cel(f"!has(self.url) || self.url.matches('{KNOWN_QUERY}')", KNOWN_QUERY_MESSAGE),
                cel(
                    f"!has(self.url) || !self.url.startsWith('redis') || "
                    f"self.url.matches('{DB_PATH}')",
                    DB_PATH_MESSAGE,
                ),
            ]
        }
    )

    url: str | None = Field(default=None, max_length=2048, pattern=REDIS_URL_PATTERN)
    secret_ref: SecretKeyRef | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> RedisRef:
        if (self.url is None) == (self.secret_ref is None):
            raise ValueError("set exactly one of redis.url or redis.secretRef")
        if self.url is not None:
            _check_url(self.url)
        return self


def _check_url(url: str) -> None:
    """The CRD's rules on redis.url, then taskfleet's URL parser (the one the CLI and the
    worker use): a spec that slipped past an older CRD still fails, and never with the
    URL in the message."""
    query = url.partition("?")[2]
    if _PASSWORD_IN_URL.match(url):
        raise ValueError(PASSWORD_MESSAGE)
    if _CREDENTIAL_IN_QUERY.search(url):
        raise ValueError(QUERY_CREDENTIAL_MESSAGE)
    if "%" in query:
        raise ValueError(PERCENT_MESSAGE)
    try:
        parsed = parse_redis_url(url)
    except InvalidRedisURL as exc:
        raise ValueError(f"redis.url is not a usable Redis URL: {exc}") from None
    if parsed.has_credentials:
        raise ValueError(PASSWORD_MESSAGE)
