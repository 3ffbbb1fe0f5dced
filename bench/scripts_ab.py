"""Redis CPU per plain task with two script bundles, alternating.

    python -m bench.scripts_ab BUNDLE_DIR_A BUNDLE_DIR_B [--rounds 10]

Each round, on one fresh redis-server: 20,000 plain tasks enqueued 1,000 a call, then
claimed 100 a call and completed, with bundle A's scripts, then B's (the order
alternating by round); redis-server's CPU time (``/proc/<pid>/schedstat``, which a loaded
machine's preemption does not inflate) per task, for the enqueue and for the drain; then
5,000 single enqueues (one task a call, with a token base as ``Queue.enqueue`` sends,
pipelined 500 at a time): Redis CPU per call. The scripts' own cost of a change, without
the clients'. Figures, never pass/fail.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import redis

from bench.run import redis_server

N = 20000
BUNDLES: dict[str, Path] = {}


def load(client: Any, d: Path) -> Any:
    m = json.loads((d / "manifest.json").read_text())
    keys = [m["key_prefix"].replace("%QUEUE%", "ab") + k["suffix"] for k in m["keys"]]
    shas = {
        name: client.script_load((d / s["file"]).read_bytes()) for name, s in m["scripts"].items()
    }
    return m, keys, shas


def pack(m: Any, name: str, args: dict[str, Any], records: Any = ()) -> list[str]:
    s = m["scripts"][name]
    out = []
    rep = s.get("repeated")
    for a in s["args"]:
        v = args.get(a["name"], "")
        if rep and a["name"] == rep["count"]:
            v = len(records)
        out.append(str(v))
    for r in records:
        for f in rep["fields"]:
            out.append(str(r.get(f["name"], "")))
    return out


def cpu(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


SINGLE = 5000


def one(url: str, side: str) -> tuple[float, float, float]:
    c = redis.Redis.from_url(url)
    c.flushall()
    m, keys, shas = load(c, BUNDLES[side])
    pid = int(c.info("server")["process_id"])

    def ev(name: str, args: dict[str, Any], recs: Any = ()) -> Any:
        return c.evalsha(shas[name], len(keys), *keys, *pack(m, name, args, recs))

    t0 = cpu(pid)
    for b in range(0, N, 1000):
        recs = [
            {"task_id": f"t{b + i}", "payload": '{"i":1}', "priority": 0, "delay_ms": 0, "cost": 1}
            for i in range(1000)
        ]
        ev("enqueue", {}, recs)
    t1 = cpu(pid)
    k = 0
    while True:
        k += 1
        r = ev(
            "claim",
            {"pod": "p", "incarnation": "i", "max_tasks": 100, "token_base": f"b{k}", "bound": 100},
        )
        recs = [x.split(b"\0", 2) for x in r[3:]]
        if not recs:
            break
        ev(
            "complete",
            {},
            [{"task_id": x[0].decode(), "token": x[1].decode(), "result": ""} for x in recs],
        )
    t2 = cpu(pid)
    c.flushall()
    for b in range(0, SINGLE, 500):
        pipe = c.pipeline(transaction=False)
        for i in range(b, b + 500):
            rec = {"task_id": f"s{i}", "payload": "{}", "priority": 0, "delay_ms": 0, "cost": 1}
            args = pack(m, "enqueue", {"token_base": f"tb{i}", "bound": 100}, [rec])
            pipe.evalsha(shas["enqueue"], len(keys), *keys, *args)
        pipe.execute()
    t3 = cpu(pid)
    c.close()
    return (t1 - t0) / N, (t2 - t1) / N, (t3 - t2) / SINGLE


def main() -> None:
    parser = argparse.ArgumentParser(description="Redis CPU per task with two bundles")
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    BUNDLES.update(a=args.a, b=args.b)
    with redis_server() as (url, _):
        res: dict[str, list[tuple[float, float, float]]] = {"a": [], "b": []}
        for i in range(args.rounds):
            for side in ("a", "b") if i % 2 == 0 else ("b", "a"):
                res[side].append(one(url, side))
    for side, rows in res.items():
        enq = sorted(r[0] for r in rows)
        dr = sorted(r[1] for r in rows)
        single = sorted(r[2] for r in rows)
        print(
            f"{side} {BUNDLES[side]}: enqueue {enq[len(enq) // 2] / 1000:.2f} us/task, "
            f"claim+complete {dr[len(dr) // 2] / 1000:.2f} us/task, single enqueue "
            f"{single[len(single) // 2] / 1000:.2f} us/call (medians; each round, "
            f"claim+complete: {[round(r[1] / 1000, 1) for r in rows]}, single: "
            f"{[round(r[2] / 1000, 1) for r in rows]})"
        )


if __name__ == "__main__":
    main()
