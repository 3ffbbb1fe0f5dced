"""What this machine allows: the cost of one Redis round trip from Python and from Go,
beside a single enqueue of taskfleet and of asynq. Figures, never pass/fail.

    python -m bench.floors [--n 20000] [--rounds 3]

Each round, on one fresh redis-server (``bench.run.redis_server``), ``--n`` sequential
calls of each kind from one client:

- ``python socket``: ``RPUSH`` written and read on a plain blocking TCP socket, no client
  library: the least a Python process pays for a round trip;
- ``redis-py``: the same ``RPUSH`` through a redis-py client, one thread (the reference
  handler's write in ``make bench``), then from 32 threads sharing the client (a worker's
  handler slots);
- ``go-redis``: the same ``RPUSH`` from Go (``asynqbench producer``'s ``rtt``, bench/go);
- ``redis-py connection, RPUSH``: the same ``RPUSH`` packed once and sent on one of a
  redis-py client's pooled connections the way ``Queue.enqueue`` sends its script
  (``wire.Connections``: no ``execute_command`` layer): the least this project's transport
  pays for a round trip;
- ``taskfleet enqueue``: ``Queue.enqueue`` of an empty payload;
- ``redis-py connection, script``: the enqueue's ``EVALSHA`` (below) on that connection:
  ``Queue.enqueue`` without its Python before the call (a plain task: ``enqueue_plain``,
  given the keys it uses);
- ``redis-py conn., whole enqueue``: the same task sent to the ``enqueue`` script
  (flows, groups, parents; its own keys), as a task with any of those options is;
- ``python, asynq's script``: asynq's own enqueue script (its two keys, a new task id and
  a message of about its size each call) sent from Python on that connection: the least a
  Python producer pays for an enqueue that does no more in Redis than asynq's;
- ``python socket, enqueue script``: the same enqueue's ``EVALSHA`` (the committed
  script, its keys, the arguments ``Queue.enqueue`` sends) written and read on a
  plain socket: what a Python producer of this protocol pays with no library around the
  call, its script included;
- ``asynq enqueue``: ``client.Enqueue`` of asynq's no-op task (``asynqbench``);
- ``taskfleet drain, no write``: ``--n`` tasks drained by one in-process ``Worker`` whose
  handler returns at once (``bench.worker_ab --handler none``): the queue's own cost per
  task, worker and Redis.

For each: the client's CPU per call (user + system, every thread; for Go, the producer
process from ``/proc``), redis-server's CPU per call (``/proc/<pid>/schedstat``) and the
rate. Medians over the rounds. The lines after the table are arithmetic on them: a Python
worker whose handler makes that write can't spend less CPU per task than the write alone,
and a drain on this machine's cores can't go faster than the cores divided by the write's
CPU on both sides, even if the queue itself cost nothing, nor faster than the cores divided
by the write's and the queue's own costs together.

Needs ``go`` for the Go rows (``bench/native.py`` builds ``asynqbench`` as ``make bench``
does); without it they are left out.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import redis

from bench.run import redis_server
from bench.worker_ab import drain_once

WORKER_SRC = Path(__file__).resolve().parent.parent / "worker-image"

RPUSH = b"*3\r\n$5\r\nRPUSH\r\n$10\r\nbench:rtt0\r\n$1\r\n1\r\n"
Row = dict[str, float]


def _redis_cpu(pid: int) -> float:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own(run: Callable[[], None], n: int, rpid: int) -> Row:
    """Time ``run`` (``n`` calls) in this process."""
    c0, r0, w0 = time.process_time(), _redis_cpu(rpid), time.monotonic()
    run()
    c1, r1, w1 = time.process_time(), _redis_cpu(rpid), time.monotonic()
    return {"cpu": (c1 - c0) / n * 1e6, "redis": (r1 - r0) / n * 1e6, "rate": n / (w1 - w0)}


def _plain_socket(url: str) -> socket.socket:
    """A TCP connection to the server of ``url``, no library, Nagle off (as redis-py's)."""
    u = urlparse(url)
    s = socket.create_connection((u.hostname or "localhost", u.port or 6379))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _socket_row(url: str, n: int, rpid: int) -> Row:
    with _plain_socket(url) as s:

        def run() -> None:
            for _ in range(n):
                s.sendall(RPUSH)
                s.recv(64)

        s.sendall(RPUSH)
        s.recv(64)
        return _own(run, n, rpid)


def _redis_py_single(client: redis.Redis, n: int, rpid: int) -> Row:
    """``n`` RPUSHes from one thread: the reference handler's write."""
    client.rpush("bench:rtt1", 1)

    def one() -> None:
        for _ in range(n):
            client.rpush("bench:rtt1", 1)

    return _own(one, n, rpid)


def _bound_per_s(cores: int, *costs_us: float) -> float:
    """Tasks per second ``cores`` allow when each task costs the sum of ``costs_us`` of CPU."""
    return cores * 1e6 / sum(costs_us)


def _redis_py_rows(url: str, n: int, rpid: int) -> tuple[Row, Row]:
    client = redis.Redis.from_url(url)
    try:
        single = _redis_py_single(client, n, rpid)
        per = n // 32

        def slot() -> None:
            for _ in range(per):
                client.rpush("bench:rtt1", 1)

        def many() -> None:
            threads = [threading.Thread(target=slot) for _ in range(32)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        return single, _own(many, per * 32, rpid)
    finally:
        client.close()


def _connection_rows(url: str, n: int, rpid: int) -> tuple[Row, Row, Row, Row]:
    """``RPUSH``, the enqueue's ``EVALSHA`` (enqueue_plain, then the whole enqueue), then
    asynq's enqueue script, as packed commands on one of redis-py's pooled connections
    (``wire.Connections``): the transport ``Queue.enqueue`` sends on, without the queue's
    Python before the call."""
    from taskfleet.protocol import bundle, wire
    from taskfleet.protocol.keys import QueueKeys

    client = redis.Redis.from_url(url)
    try:
        client.script_load(bundle.source("enqueue_plain"))
        client.script_load(bundle.source("enqueue"))
        conns = wire.Connections(client)
        conns.call(RPUSH)

        def rpush() -> None:
            for _ in range(n):
                conns.call(RPUSH)

        trivial = _own(rpush, n, rpid)
        keys = QueueKeys("floors-conn")
        plain = wire.Head(bundle.manifest()["scripts"]["enqueue_plain"]["sha1"],
                          keys.script("enqueue_plain"))  # fmt: skip

        def enqueue() -> None:
            for i in range(n):
                call = plain.command((*_PLAIN_BEFORE, f"conn-{i}", *_PLAIN_AFTER))
                if conns.call(call)[0] != 1:
                    raise RuntimeError("the enqueue_plain script refused the call")

        script = _own(enqueue, n, rpid)
        whole = wire.Head(bundle.manifest()["scripts"]["enqueue"]["sha1"],
                          keys.script("enqueue"))  # fmt: skip

        def enqueue_whole() -> None:
            for i in range(n):
                if conns.call(whole.command((*_BEFORE, f"whole-{i}", *_AFTER)))[0] != 1:
                    raise RuntimeError("the enqueue script refused the call")

        full = _own(enqueue_whole, n, rpid)
        asynq_sha = client.script_load(ASYNQ_ENQUEUE)

        def asynq_script() -> None:
            for _ in range(n):
                task_id = str(uuid.uuid4())
                keys = (f"asynq:{{default}}:t:{task_id}", "asynq:{default}:pending")
                call = wire.Head(asynq_sha, keys).command((ASYNQ_MESSAGE, task_id, time.time_ns()))
                if conns.call(call) != 1:
                    raise RuntimeError("asynq's enqueue script refused the call")

        return trivial, script, _own(asynq_script, n, rpid), full
    finally:
        client.close()


#: asynq 0.26's enqueue script (internal/rdb/rdb.go, ``enqueueCmd``), verbatim: what its
#: ``Client.Enqueue`` runs in Redis for a task with no options.
ASYNQ_ENQUEUE = """
if redis.call("EXISTS", KEYS[1]) == 1 then
	return 0
end
redis.call("HSET", KEYS[1],
           "msg", ARGV[1],
           "state", "pending",
           "pending_since", ARGV[3])
redis.call("LPUSH", KEYS[2], ARGV[2])
return 1
"""
#: About the size of asynq's encoded message of a no-op task (type, id, queue, retry,
#: timeout); its content does not matter to Redis.
ASYNQ_MESSAGE = b"\n\x04noop\x1a$" + b"0" * 36 + b'"\x07default(\x19@\x88\x0e'


def _around_id(script: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """A script's ARGV for one empty task as ``Queue.enqueue`` sends it, split around the
    task's id: built once from the protocol's signatures (``enqueue``: ``Enqueue`` +
    ``EnqueueTask``; ``enqueue_plain``: ``EnqueuePlain`` + ``PlainTask``), every field they
    name with the defaults a plain task leaves, so the rows follow the protocol."""
    from taskfleet.protocol import signatures as sig

    head: tuple[Any, ...]
    task: tuple[Any, ...] = sig.PlainTask(
        task_id="", payload="{}", priority=0, delay_ms=0, deadline="", max_attempts="",
        cost=1, timeout_s="",
    )  # fmt: skip
    if script == "enqueue":
        head = sig.Enqueue(n=1, token_base="0123456789abcdef", bound=100, trace="")
        task = sig.EnqueueTask(*task)  # a plain task's fields, the rest their defaults
    else:
        head = sig.EnqueuePlain(n=1, hand_off=1, trace="")
    return tuple(head), tuple(task[1:])


_BEFORE, _AFTER = _around_id("enqueue")
_PLAIN_BEFORE, _PLAIN_AFTER = _around_id("enqueue_plain")


def _enqueue_row(url: str, n: int, rpid: int) -> Row:
    from taskfleet import Queue

    with Queue("floors", url) as q:
        for _ in range(500):
            q.enqueue({})

        def run() -> None:
            for _ in range(n):
                q.enqueue({})

        return _own(run, n, rpid)


def _socket_enqueue_row(url: str, n: int, rpid: int) -> Row:
    from taskfleet.protocol import bundle, wire
    from taskfleet.protocol.keys import QueueKeys

    sha = bundle.manifest()["scripts"]["enqueue_plain"]["sha1"]
    head = wire.Head(sha, QueueKeys("floors-raw").script("enqueue_plain"))
    with _plain_socket(url) as s:
        admin = redis.Redis.from_url(url)
        admin.script_load(bundle.source("enqueue_plain"))
        admin.close()

        def run() -> None:
            for i in range(n):
                s.sendall(head.command((*_PLAIN_BEFORE, f"raw-{i}", *_PLAIN_AFTER)))
                if not s.recv(256).startswith(b"*2"):
                    raise RuntimeError("the enqueue script refused the call")

        return _own(run, n, rpid)


def _go_rows(url: str, n: int, rpid: int) -> tuple[Row, Row] | None:
    from bench.native import ASYNQ_BIN, prepare_asynq

    try:
        prepare_asynq()
    except (SystemExit, subprocess.CalledProcessError) as exc:
        print(f"go rows left out: {exc}", file=sys.stderr)
        return None
    proc = subprocess.Popen(
        [str(ASYNQ_BIN), "producer"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, BENCH_REDIS_URL=url),
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def ask(line: str) -> None:
        stdin.write(line + "\n")
        stdin.flush()
        reply = stdout.readline().strip()
        if reply != "ok":
            raise RuntimeError(f"asynqbench {line}: {reply}")

    def timed(line: str) -> Row:
        c0, r0, w0 = _proc_cpu(proc.pid), _redis_cpu(rpid), time.monotonic()
        ask(line)
        c1, r1, w1 = _proc_cpu(proc.pid), _redis_cpu(rpid), time.monotonic()
        return {"cpu": (c1 - c0) / n * 1e6, "redis": (r1 - r0) / n * 1e6, "rate": n / (w1 - w0)}

    try:
        ask("rtt 500")
        ask("single 500")
        return timed(f"rtt {n}"), timed(f"single {n}")
    finally:
        stdin.write("quit\n")
        stdin.flush()
        proc.wait(timeout=30)


def floor(url: str, n: int) -> dict[str, float]:
    """The drain rate ``make bench``'s reference tasks can't pass on this machine, measured
    on the Redis at ``url`` (flushed before and after): the cores divided by the handler's
    one redis-py write (client and Redis CPU, one thread) and the queue's own cost per task
    (a drain whose handler returns at once). ``bench.run`` puts it beside its drain."""
    admin = redis.Redis.from_url(url)
    try:
        rpid = int(admin.info("server")["process_id"])
        admin.flushall()
        write = _redis_py_single(admin, n, rpid)
        admin.flushall()
        own = drain_once(WORKER_SRC, url, n, "none", "plain")
        admin.flushall()
    finally:
        admin.close()
    cores = os.cpu_count() or 1
    bound = _bound_per_s(cores, write["cpu"], write["redis"], own["cpu_us"], own["redis_us"])
    return {
        "write_cpu_us": round(write["cpu"], 1),
        "write_redis_us": round(write["redis"], 1),
        "queue_cpu_us": round(own["cpu_us"], 1),
        "queue_redis_us": round(own["redis_us"], 1),
        "cores": cores,
        "bound_per_s": round(bound),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.n < 1000 or args.rounds < 1:
        print("--n must be at least 1000 and --rounds at least 1", file=sys.stderr)
        return 2
    rows: dict[str, list[Row]] = {}
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with redis_server() as (url, version):
        admin = redis.Redis.from_url(url)
        rpid = int(admin.info("server")["process_id"])
        for _ in range(args.rounds):
            admin.flushall()
            found = {"python socket RPUSH": _socket_row(url, args.n, rpid)}
            single, threads = _redis_py_rows(url, args.n, rpid)
            found["redis-py RPUSH, 1 thread"] = single
            found["redis-py RPUSH, 32 threads"] = threads
            go = _go_rows(url, args.n, rpid)
            if go is not None:
                found["go-redis RPUSH"] = go[0]
            conn_rpush, conn_enqueue, conn_asynq, conn_whole = _connection_rows(url, args.n, rpid)
            found["redis-py connection, RPUSH"] = conn_rpush
            found["taskfleet Queue.enqueue"] = _enqueue_row(url, args.n, rpid)
            found["redis-py connection, script"] = conn_enqueue
            found["redis-py conn., whole enqueue"] = conn_whole
            found["python, asynq's script"] = conn_asynq
            found["python socket, enqueue script"] = _socket_enqueue_row(url, args.n, rpid)
            if go is not None:
                found["asynq Client.Enqueue"] = go[1]
            admin.flushall()
            drain = drain_once(WORKER_SRC, url, args.n, "none", "plain")
            found["taskfleet drain, no write"] = {
                "cpu": drain["cpu_us"],
                "redis": drain["redis_us"],
                "rate": drain["rate"],
            }
            for name, row in found.items():
                rows.setdefault(name, []).append(row)
        admin.close()
    med = {
        name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in rows.items()
    }
    print(f"redis {version}, n = {args.n}, {args.rounds} rounds, medians; {os.cpu_count()} cores")
    print(f"{'':30s} {'client CPU us':>14s} {'Redis CPU us':>13s} {'calls/s':>9s}")
    for name, m in med.items():
        print(f"{name:30s} {m['cpu']:14.1f} {m['redis']:13.1f} {m['rate']:9,.0f}")
    write = med["redis-py RPUSH, 1 thread"]
    cores = os.cpu_count() or 1
    bound = _bound_per_s(cores, write["cpu"], write["redis"])
    print(
        f"a Python worker whose handler makes that write spends at least {write['cpu']:.0f} us"
        f" of CPU per task on it (1 thread; {med['redis-py RPUSH, 32 threads']['cpu']:.0f}"
        " from 32)"
    )
    print(
        f"a drain of such tasks on {cores} cores can't pass {bound:,.0f}/s even if the queue"
        " cost nothing (the write's CPU on both sides)"
    )
    own = med["taskfleet drain, no write"]
    with_queue = _bound_per_s(cores, write["cpu"], write["redis"], own["cpu"], own["redis"])
    print(
        f"with the queue's own {own['cpu']:.0f} + {own['redis']:.0f} us per task: at most"
        f" {with_queue:,.0f}/s on {cores} cores"
    )
    sock = med["python socket RPUSH"]
    print(
        f"one round trip from Python costs {sock['cpu']:.0f} us of CPU and allows"
        f" {sock['rate']:,.0f} calls/s with no library and a trivial command"
    )
    raw, lib = med["python socket, enqueue script"], med["taskfleet Queue.enqueue"]
    print(
        f"this protocol's enqueue from Python with no library around it: {raw['rate']:,.0f}/s"
        f" ({raw['cpu']:.0f} + {raw['redis']:.0f} us); Queue.enqueue {lib['rate']:,.0f}/s"
        f" ({lib['cpu']:.0f} + {lib['redis']:.0f} us)"
    )
    conn, script = med["redis-py connection, RPUSH"], med["redis-py connection, script"]
    print(
        f"on the connection Queue.enqueue sends on (redis-py's, public API): a trivial command"
        f" {conn['rate']:,.0f}/s ({conn['cpu']:.0f} + {conn['redis']:.0f} us), the enqueue"
        f" script {script['rate']:,.0f}/s ({script['cpu']:.0f} + {script['redis']:.0f} us)"
    )
    lean = med["python, asynq's script"]
    print(
        f"asynq's own enqueue script from Python on that connection: {lean['rate']:,.0f}/s"
        f" ({lean['cpu']:.0f} + {lean['redis']:.0f} us)"
    )
    whole_enq = med["redis-py conn., whole enqueue"]
    print(
        f"Redis CPU of a plain enqueue: {script['redis'] / lean['redis']:.2f}x asynq's script"
        f" from that connection, {script['redis'] / whole_enq['redis']:.2f}x the whole enqueue"
        " script's for the same task"
    )
    if "asynq Client.Enqueue" in med:
        asynq = med["asynq Client.Enqueue"]
        print(
            f"asynq's single enqueue: {asynq['rate']:,.0f}/s ({asynq['cpu']:.0f}"
            f" + {asynq['redis']:.0f} us); go-redis's trivial round trip"
            f" {med['go-redis RPUSH']['rate']:,.0f}/s"
        )
        print(
            f"ratios to asynq's single enqueue: Queue.enqueue {lib['rate'] / asynq['rate']:.2f}x,"
            f" asynq's script from Python {lean['rate'] / asynq['rate']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
