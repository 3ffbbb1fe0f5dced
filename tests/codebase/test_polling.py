"""``wait_for`` itself: every other test relies on it to wait and to say why it failed."""

from __future__ import annotations

import itertools

import pytest

from tests.polling import wait_for


def test_wait_for_returns_the_first_truthy_value_of_the_condition() -> None:
    calls = itertools.count(1)
    assert wait_for(lambda: [n] if (n := next(calls)) >= 3 else [], interval=0) == [3]


def test_at_the_deadline_the_failure_names_what_it_waited_for_as_it_is_then() -> None:
    seen: list[int] = []

    def never() -> bool:
        seen.append(len(seen))
        return False

    with pytest.raises(pytest.fail.Exception) as info:
        wait_for(never, timeout=0.05, interval=0, what=lambda: f"nothing after {len(seen)} polls")
    assert str(info.value) == f"timed out after 0.05 s waiting for nothing after {len(seen)} polls"


def test_an_exception_it_ignores_counts_as_not_yet_and_is_quoted_at_the_deadline() -> None:
    attempts = itertools.count(1)

    def flaky() -> str:
        if next(attempts) < 3:
            raise ConnectionError("reset by peer")
        return "up"

    assert wait_for(flaky, interval=0, ignoring=(ConnectionError,)) == "up"

    def broken() -> bool:
        raise KeyError("status")

    with pytest.raises(pytest.fail.Exception) as info:
        wait_for(broken, timeout=0.05, interval=0, what="a status", ignoring=(KeyError,))
    assert str(info.value).endswith("waiting for a status (last error: KeyError: 'status')")


def test_an_exception_it_was_not_told_to_ignore_ends_the_wait_at_once() -> None:
    calls: list[None] = []

    def broken() -> bool:
        calls.append(None)
        raise ValueError("a bug in the probe")

    with pytest.raises(ValueError, match="a bug in the probe"):
        wait_for(broken, timeout=5, interval=0, ignoring=(KeyError,))
    assert len(calls) == 1
