"""Redis in trouble, for real: busy with a long script, full, evicting, a password rotated.

Real redis-servers and real worker processes. A busy Redis (a script past
``busy-reply-threshold``) and a full one (``maxmemory`` under ``noeviction``) are outages
the worker waits out, keeping what it holds; an evicting one is refused at start; a
rotated password stops the worker with one line, exit 2, even mid-outage.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest
import redis
import redis.exceptions as rx
from hypothesis import given, settings
from hypothesis import strategies as st
from taskfleet.producer.queue import Queue
from taskfleet.protocol.faults import Fault, Policy, classify

from tests.fixtures_redis import RedisServer, RedisServerFactory, free_port
from tests.polling import wait_for
from tests.scrape import scrape, value
from tests.workers.harness import WORKER_INTERVAL_S, WORKER_TIMEOUT_S, Fleet, WorkerProcess

SLEEP = "tests.workers.handlers:nap"
#: Leases long enough that a fault of a few seconds takes nothing back: what is checked
#: is that the worker keeps what it holds and goes on, not the sweeps.
STEADY = ["--heartbeat-interval", "0.2", "--lease-ttl", "30", "--concurrency", "4"]


def stats(url: str) -> dict[str, int]:
    with Queue("jobs", redis_url=url) as queue:
        return queue.stats()


def enqueue(url: str, n: int, seconds: float) -> list[str]:
    with Queue("jobs", redis_url=url) as queue:
        return queue.enqueue_many([{"payload": {"seconds": seconds}} for _ in range(n)])


def wait_all_done(url: str, n: int, worker: WorkerProcess) -> None:
    wait_for(
        lambda: stats(url)["done"] == n,
        timeout=30,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"every task done; {stats(url)}\n{worker.log_text()}",
    )


def assert_nothing_lost(url: str, worker: WorkerProcess) -> None:
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log_text()
    final = stats(url)
    assert final["dead"] == 0 and final["lost"] == 0, final
    assert "worker_failed" not in worker.log_text()


def run_busy_script(server: RedisServer) -> threading.Thread:
    """A real script that loops until SCRIPT KILL: Redis answers BUSY meanwhile."""
    client = redis.Redis(host="127.0.0.1", port=server.port)

    def loop() -> None:
        try:
            client.eval("while true do end", 0)
        except rx.ResponseError:
            pass  # killed, as intended
        finally:
            client.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def test_a_worker_waits_out_a_busy_redis_and_goes_on_with_every_task(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    server = redis_server_factory(extra_args=["--busy-reply-threshold", "50"])
    fleet = Fleet(server.url, "jobs", tmp_path)
    try:
        ids = enqueue(server.url, 40, 0.05)
        worker = fleet.add(SLEEP, args=STEADY).start()
        wait_for(lambda: stats(server.url)["done"] >= 5, timeout=WORKER_TIMEOUT_S, what="a start")
        busy = run_busy_script(server)
        worker.wait_event("redis_unreachable", fault="busy")
        # still busy: the heartbeat and the probe both met BUSY, and the worker lives on
        wait_for(
            lambda: worker.alive and sum(
                e["event"] == "redis_unreachable" for e in worker.events()) == 1,
            timeout=WORKER_TIMEOUT_S, what=worker.log_text,
        )  # fmt: skip
        admin = redis.Redis(host="127.0.0.1", port=server.port)
        try:
            admin.script_kill()
        finally:
            admin.close()
        busy.join(timeout=10)
        worker.wait_event("redis_reachable", timeout=15, fault="busy")
        wait_all_done(server.url, len(ids), worker)
        assert_nothing_lost(server.url, worker)
    finally:
        fleet.close()


def test_a_probe_meeting_busy_after_a_timeout_keeps_probing_and_the_worker_resumes(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    """The wedge of a script past a long busy-reply-threshold: the worker's calls time out
    first (an outage), then its probe's PING meets BUSY. The probe must go on probing, not
    die and leave the gate shut for ever with the worker alive and claiming nothing."""
    server = redis_server_factory(extra_args=["--busy-reply-threshold", "4000"])
    fleet = Fleet(server.url, "jobs", tmp_path)
    admin = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=5)
    try:
        ids = enqueue(server.url, 20, 0.05)
        worker = fleet.add(SLEEP, args=STEADY).start()
        wait_for(lambda: stats(server.url)["done"] >= 2, timeout=WORKER_TIMEOUT_S, what="a start")
        busy = run_busy_script(server)
        worker.wait_event("redis_unreachable", timeout=15, fault="unreachable")  # timed out

        def answers_busy() -> bool:
            try:
                admin.ping()
            except rx.ResponseError as exc:
                return str(exc).startswith("BUSY")
            return False

        wait_for(answers_busy, timeout=10, what="Redis answering BUSY")
        # The scenario, not a wait on a condition: stay busy while the probe's backoff
        # brings it to Redis a few more times, each answered BUSY.
        time.sleep(3)
        assert worker.alive, worker.log_text()
        admin.script_kill()
        busy.join(timeout=10)
        worker.wait_event("redis_reachable", timeout=15)
        wait_all_done(server.url, len(ids), worker)
        assert_nothing_lost(server.url, worker)
    finally:
        admin.close()
        fleet.close()


def test_a_full_redis_is_a_write_outage_the_worker_waits_out_with_what_it_holds(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    server = redis_server_factory()
    fleet = Fleet(server.url, "jobs", tmp_path)
    port = free_port()
    metrics = f"http://127.0.0.1:{port}/metrics"
    admin = redis.Redis(host="127.0.0.1", port=server.port)
    try:
        ids = enqueue(server.url, 40, 0.05)
        worker = fleet.add(SLEEP, args=[*STEADY, "--metrics-port", str(port)]).start()
        wait_for(lambda: stats(server.url)["done"] >= 5, timeout=WORKER_TIMEOUT_S, what="a start")
        admin.config_set("maxmemory", "1")  # anything stored is over: every write refused
        worker.wait_event("redis_refusing_writes", fault="full")

        def refusing() -> bool:
            samples = scrape(metrics)
            return (
                value(samples, "taskfleet_worker_redis_refusing_writes") == 1
                and (value(samples, "taskfleet_worker_redis_refused_writes_total") or 0) >= 3
            )

        # Several refused writes in a row (heartbeats, the probe's), the worker still up.
        wait_for(refusing, timeout=WORKER_TIMEOUT_S, what=worker.log_text, ignoring=(OSError,))
        assert worker.alive, worker.log_text()
        held = stats(server.url)["running"]
        admin.config_set("maxmemory", "0")
        worker.wait_event("redis_reachable", timeout=15, fault="full")
        wait_all_done(server.url, len(ids), worker)
        assert value(scrape(metrics), "taskfleet_worker_redis_refusing_writes") == 0
        assert held >= 0
        assert_nothing_lost(server.url, worker)
    finally:
        admin.close()
        fleet.close()


def test_a_password_rotated_while_redis_is_full_stops_the_worker_with_one_line(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    server = redis_server_factory()
    fleet = Fleet(server.url, "jobs", tmp_path)
    admin = redis.Redis(host="127.0.0.1", port=server.port)
    try:
        enqueue(server.url, 20, 0.05)
        worker = fleet.add(SLEEP, args=STEADY).start()
        wait_for(lambda: stats(server.url)["done"] >= 2, timeout=WORKER_TIMEOUT_S, what="a start")
        admin.config_set("maxmemory", "1")
        worker.wait_event("redis_refusing_writes")
        admin.config_set("requirepass", "rotated-pw")
        admin.client_kill_filter(_type="normal", skipme=True)
        assert worker.wait(timeout=15) == 2, worker.log_text()
        failures = [e for e in worker.events() if e["event"] == "redis_auth_failed"]
        assert len(failures) == 1 and failures[0]["kind"] == "authentication", worker.log_text()
        assert "rotated-pw" not in worker.log_text()
    finally:
        admin.close()
        fleet.close()


@pytest.mark.parametrize("config_readable", [True, False], ids=["config", "info only"])
def test_a_worker_refuses_to_start_on_a_redis_that_evicts(
    redis_server_factory: RedisServerFactory, tmp_path: Path, config_readable: bool
) -> None:
    server = redis_server_factory(extra_args=["--maxmemory-policy", "allkeys-lru"])
    url = server.url
    if not config_readable:  # as managed services do: CONFIG refused, INFO still answers
        admin = server.admin()
        admin.execute_command("ACL", "SETUSER", "app", "on", ">app-pw", "~*", "+@all", "-config")
        admin.close()
        url = server.url_as("app", "app-pw")
    fleet = Fleet(url, "jobs", tmp_path)
    try:
        worker = fleet.add(SLEEP, args=STEADY).start()
        assert worker.wait(timeout=15) == 2, worker.log_text()
        lines = worker.log_text().strip().splitlines()
        assert len(lines) == 1, lines
        assert "allkeys-lru" in lines[0] and "maxmemory-policy noeviction" in lines[0]
        assert "--allow-eviction" in lines[0]
        with Queue("jobs", redis_url=url) as queue:
            assert queue.stats()["workers"] == 0  # nothing registered
    finally:
        fleet.close()


def test_a_worker_told_to_allow_eviction_starts_and_says_so_in_its_log_and_metrics(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    server = redis_server_factory(extra_args=["--maxmemory-policy", "volatile-lru"])
    fleet = Fleet(server.url, "jobs", tmp_path)
    port = free_port()
    try:
        enqueue(server.url, 3, 0.01)
        worker = fleet.add(
            SLEEP,
            args=[*STEADY, "--metrics-port", str(port)],
            env={"TASKFLEET_ALLOW_EVICTION": "true"},
        ).start()
        wait_all_done(server.url, 3, worker)
        assert worker.has_event("redis_evicts", maxmemory_policy="volatile-lru")
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
        assert value(samples, "taskfleet_worker_redis_evicting") == 1
        assert_nothing_lost(server.url, worker)
    finally:
        fleet.close()


# ---------------------------------------------------------------- the pure classification


def real_error(server: RedisServer, *command: object) -> BaseException:
    client = redis.Redis(host="127.0.0.1", port=server.port)
    try:
        client.execute_command(*command)
    except rx.RedisError as exc:
        return exc
    finally:
        client.close()
    raise AssertionError(f"{command} did not fail")


def test_error_replies_of_a_real_server_are_classified_by_what_they_mean(
    redis_server_factory: RedisServerFactory,
) -> None:
    server = redis_server_factory(extra_args=["--busy-reply-threshold", "50"])
    admin = server.admin()
    try:
        admin.set("s", "v")
        wrongtype = real_error(server, "LPUSH", "s", "x")
        noscript = real_error(server, "EVALSHA", "0" * 40, "0")
        script_error = real_error(server, "EVAL", "return redis.call('NOSUCH')", "0")
        admin.config_set("maxmemory", "1")
        oom = real_error(server, "SET", "k", "v")
        oom_in_script = real_error(server, "EVAL", "return redis.call('SET','k','v')", "0")
        admin.config_set("maxmemory", "0")
        busy_thread = run_busy_script(server)
        wait_for(
            lambda: isinstance(
                err := real_error(server, "PING"), rx.ResponseError
            ) and str(err).startswith("BUSY"),
            timeout=5, what="BUSY", ignoring=(AssertionError,),
        )  # fmt: skip
        busy = real_error(server, "GET", "s")
        admin.script_kill()
        busy_thread.join(timeout=5)
        admin.config_set("requirepass", "pw")
        noauth = real_error(server, "GET", "s")
    finally:
        admin.close()
    server.stop()
    unreachable = real_error(server, "PING")
    for exc, fault, policy in (
        (busy, Fault.BUSY, Policy.WAIT),
        (oom, Fault.FULL, Policy.WAIT),
        (oom_in_script, Fault.FULL, Policy.WAIT),
        (noscript, Fault.NOSCRIPT, Policy.WAIT),
        (noauth, Fault.AUTH, Policy.STOP),
        (unreachable, Fault.UNREACHABLE, Policy.WAIT),
        (wrongtype, Fault.REFUSED, Policy.FAIL_TASK),
        (script_error, Fault.REFUSED, Policy.FAIL_TASK),
    ):
        found = classify(exc)
        assert found is not None and (found.fault, found.policy) == (fault, policy), exc


@pytest.mark.parametrize(
    ("reply", "fault"),
    [
        ("LOADING Redis is loading the dataset in memory", Fault.LOADING),
        ("READONLY You can't write against a read only replica.", Fault.READONLY),
        ("MASTERDOWN Link with MASTER is down", Fault.MASTERDOWN),
        ("CLUSTERDOWN The cluster is down", Fault.CLUSTERDOWN),
        ("TRYAGAIN Multiple keys request during rehashing of slot", Fault.TRYAGAIN),
        ("MOVED 3999 127.0.0.1:6381", Fault.MOVED),
        ("MISCONF Redis is configured to save RDB snapshots", Fault.MISCONF),
        ("NOREPLICAS Not enough good replicas to write.", Fault.NOREPLICAS),
        ("UNKILLABLE Sorry the script already executed write commands", Fault.BUSY),
        ("ERR Error running script (call to f_1): @user_script:1: -OOM command", Fault.FULL),
    ],
)
def test_each_error_code_a_server_may_answer_is_an_outage_to_wait_out(
    reply: str, fault: Fault
) -> None:
    """Replies a single test server can't easily give (a replica, a cluster, a failing
    disk, Redis < 7 wrapping a script's error), told apart by their error code even where
    redis-py has no class of its own for them."""
    exc = rx.ResponseError(reply)
    found = classify(exc)
    assert found is not None and found.fault is fault and found.policy is Policy.WAIT


def test_full_and_failing_persistence_are_the_faults_that_refuse_writes() -> None:
    assert classify(rx.OutOfMemoryError("command not allowed")).writes_refused  # type: ignore[union-attr]
    assert not classify(rx.ConnectionError("refused")).writes_refused  # type: ignore[union-attr]
    assert classify(ValueError("a bug")) is None


def test_a_probe_meeting_an_error_that_is_no_outage_raises_it_in_every_waiter() -> None:
    """The gate's probe never dies quietly: a loop left waiting on a gate nobody opens
    is a worker heartbeating forever without claiming."""
    import asyncio

    from taskfleet.worker.gate import ProbeFailed, RedisGate

    async def scenario() -> list[BaseException | None]:
        async def reconnect() -> None:
            raise rx.ResponseError("WRONGTYPE Operation against a key holding the wrong kind")

        gate = RedisGate(reconnect, lambda: None, backoff_base=0.01, backoff_max=0.02)

        async def loop() -> None:
            try:
                raise rx.ConnectionError("Connection refused")
            except rx.ConnectionError as exc:
                await gate.wait_out(exc)

        outcomes = await asyncio.wait_for(
            asyncio.gather(loop(), loop(), return_exceptions=True), timeout=5
        )
        await gate.close()
        return [o if isinstance(o, BaseException) else None for o in outcomes]

    outcomes = asyncio.run(scenario())
    assert all(isinstance(o, ProbeFailed) for o in outcomes), outcomes


def test_a_pod_of_several_worker_processes_refuses_an_evicting_redis_as_one(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    """``--processes``: each process finds the policy, exits 2, and the supervisor ends
    the pod with 2 instead of re-forking them in a loop."""
    server = redis_server_factory(extra_args=["--maxmemory-policy", "allkeys-random"])
    fleet = Fleet(server.url, "jobs", tmp_path)
    try:
        worker = fleet.add(SLEEP, args=[*STEADY, "--processes", "2"]).start()
        assert worker.wait(timeout=30) == 2, worker.log_text()
        log = worker.log_text()
        assert "maxmemory-policy noeviction" in log
        assert not worker.has_event("crash_loop") and not worker.has_event("process_restart")
    finally:
        fleet.close()


def test_taskfleet_stats_warns_when_redis_may_evict_tasks(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    from tests.workers.harness import env_for, taskfleet

    server = redis_server_factory(extra_args=["--maxmemory-policy", "allkeys-lru"])
    env = env_for(server.url, tmp_path)
    evicting = taskfleet("stats", "jobs", "--json", env=env)
    assert evicting.returncode == 0, evicting.stderr
    assert "maxmemory-policy is 'allkeys-lru'" in evicting.stderr
    assert evicting.stdout.startswith("{")  # the JSON alone on stdout
    admin = server.admin()
    admin.config_set("maxmemory-policy", "noeviction")
    admin.close()
    safe = taskfleet("stats", "jobs", env=env)
    assert safe.returncode == 0 and "warning" not in safe.stderr, safe.stderr


WAITED_CODES = ["BUSY", "LOADING", "OOM", "MISCONF", "NOREPLICAS", "READONLY", "MASTERDOWN",
                "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "NOSCRIPT", "UNKILLABLE"]  # fmt: skip


@given(code=st.sampled_from([*WAITED_CODES, "ERR", "WRONGTYPE", "NOPERM", "WRONGPASS", ""]),
       rest=st.text(max_size=80))  # fmt: skip
@settings(max_examples=200, deadline=None)
def test_any_error_reply_is_classified_once_and_only_known_codes_are_waited_out(
    code: str, rest: str
) -> None:
    """Whatever text follows the code: a wait for the codes of outages, a stop for refused
    credentials or rights, the request's own fault for the rest; never an exception."""
    found = classify(rx.ResponseError(f"{code} {rest}" if code else rest))
    assert found is not None
    if code in WAITED_CODES:
        assert found.policy is Policy.WAIT
    elif code in ("NOPERM", "WRONGPASS"):
        assert found.policy is Policy.STOP
    elif code == "WRONGTYPE" and "can't run this command" not in rest:
        assert found.policy is Policy.FAIL_TASK
