"""Load that runs through an upgrade, and what is watched meanwhile.

`Load` enqueues one task per producer every tick until stopped, each with an id of its own
choosing (an enqueue retried after a lost reply is idempotent, so every task is known by
id); every other tick's tasks are in a group. Producers are the library this suite runs
(`LibraryProducer`) or another version's, in a subprocess (`ProcessProducer`,
e2e/release/producer_process.py). `ReplicasWatch` keeps every version of a Deployment the
API showed (a scale to zero between two polls would not be missed), `LevelsWatch` the
levels of the workers registered on a queue, and `overlaps` reads the handler's own
execution records for two runs of one task at the same time.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import redis

from e2e.lib.kube import Kube
from e2e.lib.ledger import QueueView
from e2e.lib.portforward import PortForward

__all__ = [
    "LevelsWatch",
    "LibraryProducer",
    "Load",
    "ProcessProducer",
    "ReplicasWatch",
    "overlaps",
]

PRODUCER_SCRIPT = Path(__file__).resolve().parent / "producer_process.py"
#: The group of the load's grouped tasks (every other tick's).
GROUP = "tenant-a"


class Producer(Protocol):
    name: str

    def enqueue(self, task_id: str, payload: dict[str, Any], group: str | None = None) -> str: ...

    def close(self) -> None: ...


class LibraryProducer:
    """Enqueues with the ``taskfleet`` this process imports, through the test's forward."""

    def __init__(self, name: str, forward: PortForward, queue: str):
        self.name = name
        self.forward = forward
        self.queue = queue

    def enqueue(self, task_id: str, payload: dict[str, Any], group: str | None = None) -> str:
        from taskfleet.producer.queue import Queue

        def once(_: redis.Redis) -> str:
            with Queue(self.queue, self.forward.url) as queue:
                return queue.enqueue(payload, task_id=task_id, group=group)

        return self.forward.call(once, timeout=120)

    def close(self) -> None:
        pass


class ProcessProducer:
    """Enqueues with the ``taskfleet`` another interpreter imports (a previous release's
    library in its own venv), through the same forward: a reply that says Redis could not
    be reached restarts the forward and the same enqueue is sent again."""

    def __init__(self, name: str, python: Path, forward: PortForward, queue: str):
        self.name = name
        self.forward = forward
        self.queue = queue
        self.versions: set[str] = set()
        self._process = subprocess.Popen(
            [str(python), str(PRODUCER_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def enqueue(self, task_id: str, payload: dict[str, Any], group: str | None = None) -> str:
        def once(_: redis.Redis) -> str:
            request = {
                "url": self.forward.url,
                "queue": self.queue,
                "task_id": task_id,
                "payload": payload,
                "group": group,
            }
            assert self._process.stdin is not None and self._process.stdout is not None
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            line = self._process.stdout.readline()
            if not line:
                raise AssertionError(f"producer {self.name} exited ({self._process.poll()})")
            reply = json.loads(line)
            if "error" in reply:
                if reply["connection"]:
                    raise redis.ConnectionError(reply["error"])
                raise AssertionError(f"producer {self.name}: {reply['error']}")
            self.versions.add(reply["version"])
            return str(reply["id"])

        return self.forward.call(once, timeout=120)

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()


class Load(threading.Thread):
    """Every ``interval`` seconds, one task of ``seconds`` per producer, until `stop`.

    Ids are ``<producer>-<n>``: a task's id says who enqueued it. Tasks of an odd ``n`` are
    in the group ``GROUP`` (``grouped``). An enqueue that fails for good stops the load;
    `stop` raises it in the test's thread."""

    def __init__(
        self, producers: Iterable[Producer], *, seconds: float, interval: float, record_key: str
    ):
        super().__init__(daemon=True)
        self.producers = list(producers)
        self.payload = {"seconds": seconds, "record_key": record_key}
        self.interval = interval
        self.ids: dict[str, list[str]] = {p.name: [] for p in self.producers}
        self.grouped: set[str] = set()
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        count = 0
        try:
            while not self._stop_event.is_set():
                group = GROUP if count % 2 else None
                for producer in self.producers:
                    task_id = f"{producer.name}-{count:05d}"
                    returned = producer.enqueue(task_id, self.payload, group)
                    assert returned == task_id, f"enqueue of {task_id} returned {returned}"
                    self.ids[producer.name].append(task_id)
                    if group:
                        self.grouped.add(task_id)
                count += 1
                self._stop_event.wait(self.interval)
        except BaseException as exc:
            self.error = exc

    def all_ids(self) -> list[str]:
        return [task_id for ids in self.ids.values() for task_id in ids]

    def check(self) -> None:
        """Fail now if the load stopped on an error."""
        if self.error is not None:
            raise AssertionError(f"the load stopped: {self.error!r}") from self.error

    def stop(self) -> list[str]:
        self._stop_event.set()
        self.join(timeout=180)
        assert not self.is_alive(), "the load did not stop"
        for producer in self.producers:
            producer.close()
        self.check()
        return self.all_ids()


@dataclass(frozen=True)
class Seen:
    """One version of the Deployment as the watch delivered it."""

    at: float  # monotonic
    replicas: int  # spec.replicas: what the operator asked for
    ready: int  # status.readyReplicas
    images: tuple[str, ...]


class ReplicasWatch:
    """``kubectl get deployment NAME --watch -o json``: every version the API showed, kept
    from start to `stop`. The watch is restarted if kubectl ends (its first event is then
    the current state again), so no stretch of time goes unwatched."""

    def __init__(self, kube: Kube, name: str):
        self.kube = kube
        self.name = name
        self.seen: list[Seen] = []
        self._stopping = threading.Event()
        self._process: subprocess.Popen[str] | None = None
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        while not self._stopping.is_set():
            self._process = subprocess.Popen(
                self.kube.argv("get", "deployment", self.name, "--watch", "-o", "json"),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert self._process.stdout is not None
            decoder = json.JSONDecoder()
            buffer = ""
            for line in self._process.stdout:
                buffer += line
                while buffer.strip():
                    try:
                        obj, end = decoder.raw_decode(buffer.lstrip())
                    except ValueError:
                        break
                    buffer = buffer.lstrip()[end:]
                    self._keep(obj)
            self._process.wait()
            self._process.stdout.close()

    def _keep(self, obj: dict[str, Any]) -> None:
        containers = obj["spec"]["template"]["spec"]["containers"]
        self.seen.append(
            Seen(
                at=time.monotonic(),
                replicas=int(obj["spec"].get("replicas", 1)),
                ready=int((obj.get("status") or {}).get("readyReplicas") or 0),
                images=tuple(c["image"] for c in containers),
            )
        )

    def since(self, start: float) -> list[Seen]:
        """The versions delivered at or after ``start`` (monotonic), and the one in force
        then (the last before it)."""
        seen = list(self.seen)
        before = [s for s in seen if s.at < start]
        return before[-1:] + [s for s in seen if s.at >= start]

    def stop(self) -> None:
        self._stopping.set()
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
        self._thread.join(timeout=15)


class LevelsWatch:
    """The levels of the worker records on a queue, read every ``interval`` seconds until
    `stop`: every level seen, and how many reads found records of two levels at once (old
    and new workers registered together on the queue)."""

    def __init__(self, queue: QueueView, interval: float = 1.0):
        self.queue = queue
        self.interval = interval
        self.levels: set[int] = set()
        self.mixed: dict[tuple[int, ...], int] = defaultdict(int)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        while not self._stopping.wait(self.interval):
            try:
                records = self.queue.workers()
            except (redis.RedisError, OSError, RuntimeError, ValueError):
                continue  # a forward restarting: the next read sees the records again
            # a record without a level is a 0.1.x worker's: level 1 (records.WorkerRecord)
            found = {int(r.get("level") or 1) for r in records.values() if isinstance(r, dict)}
            self.levels |= found
            if len(found) > 1:
                self.mixed[tuple(sorted(found))] += 1

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=30)


def overlaps(executions: Iterable[dict[str, Any]], seconds: float) -> dict[str, list[float]]:
    """Tasks with two finished executions at the same time: id -> their finishing times.

    The sample handler sleeps ``seconds`` and then records its finishing time (``at``), so
    each execution covered at least ``[at - seconds, at]``; two executions of one task whose
    finishing times are less than ``seconds`` apart ran at the same time."""
    finished: dict[str, list[float]] = defaultdict(list)
    for record in executions:
        finished[str(record["id"])].append(float(record["at"]))
    found = {}
    for task_id, times in finished.items():
        times.sort()
        if any(b - a < seconds for a, b in itertools.pairwise(times)):
            found[task_id] = times
    return found
