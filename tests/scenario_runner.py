"""The worker-behaviour scenarios (conformance/scenarios/*.json), as the Python worker runs
them: real ``taskfleet worker`` processes on a real redis-server, signals, deadlines.

conformance/scenarios/README.md describes the format; ``check`` refuses a file that
strays from it before anything runs. The handler vocabulary is
tests/workers/scenario_handlers.py; clients/node/test/scenarios.ts runs the same files
with the Node worker.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.errors import OlderWorker

from tests.fixtures_redis import server_ms
from tests.workers.harness import WorkerProcess

FORMAT = 1
HANDLER = "tests.workers.scenario_handlers:run"
#: A condition is looked at this often while a step waits on it.
INTERVAL_S = 0.02
#: Each behaviour and the payload keys it takes (besides ``do``), required.
BEHAVIOURS: dict[str, set[str]] = {
    "succeed": {"result"},
    "fail": {"error"},
    "hold": {"gate"},
    "sleep": {"ms"},
    "hang": set(),
}
#: Worker options and the flags both workers take for them.
WORKER_OPTIONS = {
    "concurrency": "--concurrency",
    "drain_timeout_s": "--drain-timeout",
    "heartbeat_s": "--heartbeat-interval",
    "prefetch": "--prefetch",
}
#: Beats often by default, so a lease of a second is kept by a live worker.
HEARTBEAT_S = "0.2"
CONFIG = {"lease_ttl_s", "max_attempts"}
ENQUEUE_OPTIONS = {"group", "max_attempts"}
SIGNALS = {"SIGTERM", "SIGINT", "SIGKILL", "SIGSTOP", "SIGCONT"}
#: Each step kind and the other keys it takes (those in the second set are optional).
STEPS: dict[str, tuple[set[str], set[str]]] = {
    "configure": (set(), set()),
    "start": (set(), {"options"}),
    "enqueue": ({"payload"}, {"options", "refused"}),
    "signal": ({"worker"}, set()),
    "release": (set(), set()),
    "cancel": ({"outcome"}, set()),
    "pause_claims": (set(), {"refused"}),
    "resume_claims": (set(), set()),
    "older_worker": (set(), set()),
    "older_worker_gone": (set(), set()),
    "wait": ({"within_s"}, set()),
    "expect": (set(), set()),
    "stays": ({"for_s"}, set()),
}
CONDITIONS: dict[str, tuple[set[str], set[str]]] = {
    "task": (set(), {"state", "attempts", "lost", "worker", "result", "error", "reason"}),
    "stats": (set(), set()),
    "handled": ({"count"}, {"of", "by"}),
    "exited": (set(), {"code"}),
    "logged": ({"worker"}, set()),
    "any": (set(), set()),
}
#: The queue counts a ``stats`` condition may name (``Queue.stats``).
STATS = {
    *("pending", "delayed", "running", "done", "dead", "cancelled", "waiting", "workers"),
    *("enqueued", "completed", "failed", "retried", "dead_total", "requeued", "lost"),
    *("released", "stale", "expired", "cancelled_total", "deferred"),
}
CANCEL_OUTCOMES = {"cancelled", "requested", "done", "dead", "finished", "not_found"}
NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class ScenarioFormatError(Exception):
    """The file strays from the format: nothing ran."""


class StepFailedError(AssertionError):
    """A step of the scenario did not hold."""


# ------------------------------------------------------------------ the format


def load(path: Path) -> dict[str, Any]:
    """The scenario in ``path``, checked."""
    try:
        scenario = json.loads(path.read_text())
    except ValueError as exc:
        raise ScenarioFormatError(f"{path.name}: not JSON: {exc}") from None
    check(scenario, path.stem)
    return dict(scenario)


def _keys(where: str, obj: Any, kinds: dict[str, tuple[set[str], set[str]]]) -> str:
    """The one kind key of ``obj``; its other keys must be those its kind takes."""
    if not isinstance(obj, dict):
        raise ScenarioFormatError(f"{where}: an object expected, got {obj!r}")
    found = [k for k in obj if k in kinds]
    if len(found) != 1:
        raise ScenarioFormatError(
            f"{where}: exactly one of {sorted(kinds)} expected, got {sorted(obj)}"
        )
    kind = found[0]
    required, optional = kinds[kind]
    if missing := required - obj.keys():
        raise ScenarioFormatError(f"{where} ({kind}): missing {sorted(missing)}")
    if extra := obj.keys() - required - optional - {kind, "doc"}:
        raise ScenarioFormatError(f"{where} ({kind}): unknown keys {sorted(extra)}")
    return kind


def _name(where: str, value: Any) -> None:
    if not isinstance(value, str) or not NAME.match(value):
        raise ScenarioFormatError(f"{where}: a name ([a-z0-9][a-z0-9-]*) expected, got {value!r}")


def _number(where: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ScenarioFormatError(f"{where}: a number >= 0 expected, got {value!r}")


def _only(where: str, obj: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ScenarioFormatError(f"{where}: an object expected, got {obj!r}")
    if extra := obj.keys() - allowed:
        raise ScenarioFormatError(
            f"{where}: unknown keys {sorted(extra)}; known: {sorted(allowed)}"
        )
    return obj


def check(scenario: Any, name: str) -> None:
    """Raise ``ScenarioFormatError`` saying where ``scenario`` strays from the format."""
    top = _only(name, scenario, {"format", "doc", "queue", "steps"})
    if top.get("format") != FORMAT:
        raise ScenarioFormatError(f"{name}: format {FORMAT} expected, got {top.get('format')!r}")
    if not isinstance(top.get("doc"), str) or not re.match(r"^[a-z0-9._-]+$", top.get("queue", "")):
        raise ScenarioFormatError(f"{name}: a doc and a queue name ([a-z0-9._-]+) expected")
    steps = top.get("steps")
    if not isinstance(steps, list) or not steps:
        raise ScenarioFormatError(f"{name}: a non-empty list of steps expected")
    for i, step in enumerate(steps):
        _check_step(f"{name} step {i}", step)


def _check_step(where: str, step: Any) -> None:
    kind = _keys(where, step, STEPS)
    value = step[kind]
    if kind == "configure":
        for key, number in _only(where, value, CONFIG).items():
            _number(f"{where} {key}", number)
    elif kind in ("start", "signal", "older_worker", "older_worker_gone"):
        _name(where, step.get("worker", value))
        if kind == "signal" and value not in SIGNALS:
            raise ScenarioFormatError(f"{where}: one of {sorted(SIGNALS)} expected, got {value!r}")
        for key, number in _only(where, step.get("options", {}), set(WORKER_OPTIONS)).items():
            _number(f"{where} {key}", number)
    elif kind == "enqueue":
        _name(where, value)
        payload = _only(where, step["payload"], {"do", *set().union(*BEHAVIOURS.values())})
        wanted = BEHAVIOURS.get(payload.get("do", ""))
        if wanted is None or payload.keys() != {"do", *wanted}:
            raise ScenarioFormatError(f"{where}: a payload of the handler vocabulary expected")
        _only(where, step.get("options", {}), ENQUEUE_OPTIONS)
    elif kind in {"release", "cancel"}:
        _name(where, value)
        if kind == "cancel" and step["outcome"] not in CANCEL_OUTCOMES:
            raise ScenarioFormatError(f"{where}: an outcome of {sorted(CANCEL_OUTCOMES)} expected")
    elif kind == "pause_claims":
        _number(where, value)
    elif kind in ("wait", "expect", "stays"):
        if not isinstance(value, list) or not value:
            raise ScenarioFormatError(f"{where}: a non-empty list of conditions expected")
        _check_conditions(where, value)
        for key in ("within_s", "for_s"):
            if key in step:
                _number(f"{where} {key}", step[key])


def _check_conditions(where: str, conditions: list[Any]) -> None:
    for j, condition in enumerate(conditions):
        kind = _keys(f"{where} condition {j}", condition, CONDITIONS)
        if kind == "stats":
            for key, number in _only(where, condition["stats"], STATS).items():
                _number(f"{where} stats {key}", number)
        elif kind == "any":
            inner = condition["any"]
            if not isinstance(inner, list) or len(inner) < 2:
                raise ScenarioFormatError(f"{where} condition {j}: 2 or more conditions expected")
            _check_conditions(f"{where} condition {j} any", inner)


# ------------------------------------------------------------------ running


class Runner:
    """Runs one checked scenario with real worker processes; ``close()`` kills those left."""

    def __init__(self, scenario: dict[str, Any], name: str, redis_url: str, workdir: Path):
        self.scenario = scenario
        self.name = name
        self.redis_url = redis_url
        self.workdir = workdir
        self.queue = Queue(scenario["queue"], redis_url=redis_url)
        self.workers: dict[str, WorkerProcess] = {}

    def run(self) -> None:
        for i, step in enumerate(self.scenario["steps"]):
            kind = next(k for k in step if k in STEPS)
            try:
                getattr(self, f"_{kind}")(step, step[kind])
            except StepFailedError as exc:
                raise StepFailedError(
                    f"{self.name} step {i} ({kind}): {exc}\n{self.logs()}"
                ) from None

    def close(self) -> None:
        for worker in self.workers.values():
            worker.kill()
        self.queue.close()

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{w.log_text()[-3000:]}" for n, w in self.workers.items())

    # steps

    def _configure(self, step: dict[str, Any], value: dict[str, Any]) -> None:
        self.queue.configure(QueueConfig(**(self.queue.config().model_dump() | value)))

    def _start(self, step: dict[str, Any], name: str) -> None:
        args = ["--heartbeat-interval", HEARTBEAT_S]
        for key, number in step.get("options", {}).items():
            args += [WORKER_OPTIONS[key], str(number)]
        worker = WorkerProcess(
            redis_url=self.redis_url,
            queue=self.scenario["queue"],
            handler=HANDLER,
            workdir=self.workdir,
            pod=name,
            args=args,
            env={"TASKFLEET_SCENARIO_DIR": str(self.workdir)},
        )
        self.workers[name] = worker.start()

    def _enqueue(self, step: dict[str, Any], task_id: str) -> None:
        options = step.get("options", {})
        self._refusable(
            step,
            lambda: self.queue.enqueue(step["payload"], task_id=task_id, **options),
        )

    def _signal(self, step: dict[str, Any], name: str) -> None:
        self._worker(step["worker"]).signal(getattr(signal, name))

    def _release(self, step: dict[str, Any], gate: str) -> None:
        (self.workdir / f"gate-{gate}").touch()

    def _cancel(self, step: dict[str, Any], task_id: str) -> None:
        outcome = str(self.queue.cancel(task_id))
        if outcome != step["outcome"]:
            raise StepFailedError(f"cancel said {outcome!r}, expected {step['outcome']!r}")

    def _pause_claims(self, step: dict[str, Any], seconds: float) -> None:
        self._refusable(step, lambda: self.queue.pause_claims(seconds))

    def _resume_claims(self, step: dict[str, Any], value: Any) -> None:
        self.queue.resume_claims()

    def _older_worker(self, step: dict[str, Any], pod: str) -> None:
        # a live record as a worker of the first release (0.1.x) writes it: no level
        record = {"incarnation": "i0", "inflight": 0, "concurrency": 4, "draining": False}
        record["heartbeat_ms"] = server_ms(self.queue.client)
        self.queue.client.hset(self.queue.keys.workers, pod, json.dumps(record))

    def _older_worker_gone(self, step: dict[str, Any], pod: str) -> None:
        self.queue.client.hdel(self.queue.keys.workers, pod)

    def _wait(self, step: dict[str, Any], conditions: list[dict[str, Any]]) -> None:
        deadline = time.monotonic() + step["within_s"]
        while (unmet := self._unmet(conditions)) is not None:
            if time.monotonic() > deadline:
                raise StepFailedError(f"not within {step['within_s']} s: {unmet}")
            time.sleep(INTERVAL_S)

    def _expect(self, step: dict[str, Any], conditions: list[dict[str, Any]]) -> None:
        if (unmet := self._unmet(conditions)) is not None:
            raise StepFailedError(unmet)

    def _stays(self, step: dict[str, Any], conditions: list[dict[str, Any]]) -> None:
        """What must not happen for a while (a claim during a pause): looked at throughout."""
        deadline = time.monotonic() + step["for_s"]
        while time.monotonic() < deadline:
            if (unmet := self._unmet(conditions)) is not None:
                raise StepFailedError(f"within {step['for_s']} s: {unmet}")
            time.sleep(INTERVAL_S)

    def _refusable(self, step: dict[str, Any], call: Callable[[], object]) -> None:
        refused = step.get("refused")
        try:
            call()
        except OlderWorker as exc:
            if exc.feature != refused:
                raise StepFailedError(
                    f"refused for {exc.feature!r}, expected {refused!r}"
                ) from None
            return
        if refused is not None:
            raise StepFailedError(f"not refused, expected a refusal for {refused!r}")

    def _worker(self, name: str) -> WorkerProcess:
        if name not in self.workers:
            raise StepFailedError(f"no worker {name!r} was started")
        return self.workers[name]

    # conditions: None when all hold, else what does not

    def _unmet(self, conditions: list[dict[str, Any]]) -> str | None:
        for condition in conditions:
            kind = next(k for k in condition if k in CONDITIONS)
            unmet = getattr(self, f"_is_{kind}")(condition, condition[kind])
            if unmet is not None:
                return f"{json.dumps(condition)}: {unmet}"
        return None

    def _is_task(self, condition: dict[str, Any], task_id: str) -> str | None:
        task = self.queue.get(task_id)
        if task is None:
            return "no such task"
        found = {
            "state": task.state.value,
            "attempts": task.attempts,
            "lost": task.lost,
            "worker": task.pod,
            "result": task.result,
            "error": task.error,
            "reason": task.reason,
        }
        for key, expected in condition.items():
            if key in ("task", "doc"):
                continue
            value = found[key]
            ok = expected in (value or "") if key == "error" else value == expected
            if not ok:
                return f"{key} is {value!r}"
        return None

    def _is_stats(self, condition: dict[str, Any], expected: dict[str, int]) -> str | None:
        stats = self.queue.stats()
        wrong = {k: stats[k] for k, v in expected.items() if stats[k] != v}
        return f"found {wrong}" if wrong else None

    def _is_handled(self, condition: dict[str, Any], did: str) -> str | None:
        path = self.workdir / "handled"
        lines = (
            [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        )
        want = {"did": did} | {
            k: condition[n] for n, k in (("of", "task"), ("by", "worker")) if n in condition
        }
        count = sum(all(line[k] == v for k, v in want.items()) for line in lines)
        return None if count == condition["count"] else f"{count} such runs in {lines}"

    def _is_exited(self, condition: dict[str, Any], name: str) -> str | None:
        process = self._worker(name).process
        code = None if process is None else process.poll()
        if code is None:
            return "still running"
        if "code" in condition and code != condition["code"]:
            return f"exit code {code}"
        return None

    def _is_logged(self, condition: dict[str, Any], event: str) -> str | None:
        return None if self._worker(condition["worker"]).has_event(event) else "not logged yet"

    def _is_any(self, condition: dict[str, Any], conditions: list[dict[str, Any]]) -> str | None:
        unmet = [self._unmet([c]) for c in conditions]
        return None if None in unmet else f"none holds: {'; '.join(map(str, unmet))}"


def run_scenario(path: Path, redis_url: str, workdir: Path) -> None:
    """Run the scenario in ``path`` on a flushed server; ``StepFailedError`` if a step fails."""
    scenario = load(path)
    runner = Runner(scenario, path.stem, redis_url, workdir)
    try:
        runner.run()
    finally:
        runner.close()
