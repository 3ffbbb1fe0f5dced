"""Redis refusing the credentials or the user's rights is bad configuration, not an outage.

A real redis-server with ``requirepass`` and ACL users; real worker processes and real
``taskfleet`` commands. Each must end at once with one clear line, exit code 2 and no
password in its output, where an outage would keep retrying.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from taskfleet.producer.queue import Queue
from taskfleet.protocol.tasks import TaskState

from tests.fixtures_redis import RedisServer, RedisServerFactory
from tests.polling import wait_for
from tests.workers.harness import (
    FAST,
    WORKER_INTERVAL_S,
    WORKER_TIMEOUT_S,
    Fleet,
    env_for,
    taskfleet,
)

SLEEP = "tests.workers.handlers:sleep"
PASSWORD = "s3cret-admin-pw"
USER_PASSWORD = "u5er-pw-never-shown"
#: ACL users, each lacking something the worker needs.
USERS = {
    # may not touch the queue's keys: NOPERM on the script call
    "nokeys": ["~other:*", "+@all"],
    # may not run scripts at all: NOPERM on EVALSHA
    "noscripts": ["~*", "+@all", "-evalsha", "-eval", "-script"],
    # may not run a command the scripts run: Redis 7.0 says so with a plain error
    "nohset": ["~*", "+@all", "-hset"],
    # may do everything (the worker that loses its rights or password later)
    "full": ["~*", "+@all"],
}


@pytest.fixture
def secured(redis_server_factory: RedisServerFactory) -> Iterator[RedisServer]:
    """A server that requires a password, with the ACL users of ``USERS``."""
    server = redis_server_factory(persistent=False, password=PASSWORD)
    admin = server.admin()
    try:
        for user, rules in USERS.items():
            admin.execute_command("ACL", "SETUSER", user, "on", f">{USER_PASSWORD}", *rules)
    finally:
        admin.close()
    yield server


def refused_worker(fleet: Fleet, url: str) -> tuple[int, str]:
    worker = fleet.add(SLEEP, env={"TASKFLEET_REDIS_URL": url}).start()
    code = worker.wait(timeout=15)
    return code, worker.log_text()


def assert_one_auth_failure(log: str, kind: str) -> None:
    assert log.count('"redis_auth_failed"') == 1, log
    assert f'"kind": "{kind}"' in log, log
    # the refusal comes first: no eviction-policy line that blames something else
    unexpected = ("redis_eviction_policy_unknown", "redis_unreachable", "worker_failed")
    for absent in (*unexpected, "worker_started", "Traceback"):
        assert absent not in log, log
    for secret in (PASSWORD, USER_PASSWORD, "wrong-pw-xyz"):
        assert secret not in log


@pytest.mark.parametrize(
    ("user", "password"),
    [(None, "wrong-pw-xyz"), (None, None), ("nobody", "wrong-pw-xyz")],
    ids=["wrong password", "no password", "unknown user"],
)
def test_a_worker_refused_its_credentials_at_start_logs_one_line_and_exits_2(
    secured: RedisServer, tmp_path: Path, user: str | None, password: str | None
) -> None:
    fleet = Fleet(secured.url, "jobs", tmp_path)
    try:
        code, log = refused_worker(fleet, secured.url_as(user, password))
    finally:
        fleet.close()
    assert code == 2, log
    assert_one_auth_failure(log, "authentication")


@pytest.mark.parametrize("user", ["nokeys", "noscripts", "nohset"])
def test_a_worker_whose_user_lacks_a_permission_logs_one_line_and_exits_2(
    secured: RedisServer, tmp_path: Path, user: str
) -> None:
    fleet = Fleet(secured.url, "jobs", tmp_path)
    try:
        code, log = refused_worker(fleet, secured.url_as(user, USER_PASSWORD))
    finally:
        fleet.close()
    assert code == 2, log
    assert_one_auth_failure(log, "permission")


@pytest.mark.parametrize("change", ["password rotated", "permissions revoked"])
def test_a_running_worker_refused_later_logs_one_line_and_exits_2(
    secured: RedisServer, tmp_path: Path, change: str
) -> None:
    fleet = Fleet(secured.url, "jobs", tmp_path)
    admin = secured.admin()
    queue = Queue("jobs", client=secured.admin())
    try:
        worker = fleet.add(
            SLEEP, args=FAST, env={"TASKFLEET_REDIS_URL": secured.url_as("full", USER_PASSWORD)}
        ).start()
        first = queue.enqueue({})
        wait_for(
            lambda: queue.get(first).state is TaskState.DONE,  # type: ignore[union-attr]
            timeout=WORKER_TIMEOUT_S,
            interval=WORKER_INTERVAL_S,
        )
        if change == "password rotated":
            admin.execute_command("ACL", "SETUSER", "full", "resetpass", ">rotated-pw")
            admin.execute_command("CLIENT", "KILL", "USER", "full")
            kind = "authentication"
        else:
            admin.execute_command("ACL", "SETUSER", "full", "-@all")
            kind = "permission"
        assert worker.wait(timeout=15) == 2, worker.log_text()
        log = worker.log_text()
        assert log.count('"redis_auth_failed"') == 1, log
        assert f'"kind": "{kind}"' in log, log
        assert "worker_failed" not in log and USER_PASSWORD not in log
    finally:
        fleet.close()
        queue.close()
        admin.close()


@pytest.mark.parametrize("command", [["stats", "jobs"], ["enqueue", "jobs"], ["task", "jobs", "x"]])
def test_commands_refused_by_redis_say_so_in_one_line_and_exit_2(
    secured: RedisServer, tmp_path: Path, command: list[str]
) -> None:
    for url, says in (
        (secured.url_as(None, "wrong-pw-xyz"), "refused the credentials"),
        (secured.url_as("nokeys", USER_PASSWORD), "refused a command for this user"),
    ):
        result = taskfleet(*command, env=env_for(url, tmp_path))
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("taskfleet: error: Redis at "), lines
        assert says in lines[0], lines[0]
        for secret in ("wrong-pw-xyz", USER_PASSWORD):
            assert secret not in result.stderr + result.stdout
