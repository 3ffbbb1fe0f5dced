"""A schedule firer as its own process, for the race tests: fires what is due until a
stop file appears, then writes what it did (JSON) to its report file.

    python -m tests.workers.firer REDIS_URL QUEUE STOP_FILE REPORT_FILE [BATCH]

It counts the slots of the plans the store accepted: summed over every firer, that is
how many times slots fired, to compare with the distinct tasks they made.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import redis
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.schedule_ops import ScheduleOps
from taskfleet.protocol.schedules import FIRE_LEASE_MS, plan
from taskfleet.protocol.scripts import SyncScripts


def main() -> None:
    url, queue, stop, report = sys.argv[1:5]
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 100
    client = redis.Redis.from_url(url)
    scripts, ops = SyncScripts.for_client(client), ScheduleOps(QueueKeys(queue))
    applied_slots = created = calls = stale = 0
    while not Path(stop).exists():
        claimed = scripts.run(ops.due(batch, FIRE_LEASE_MS))
        calls += 1
        if not claimed.due:
            time.sleep(0.005)
            continue
        plans = [plan(d, claimed.now_ms) for d in claimed.due]
        fired = scripts.run(ops.fire(plans))
        created += fired.created
        for p, ok in zip(plans, fired.applied, strict=True):
            if ok:
                applied_slots += len(p.slots)
            else:
                stale += 1
    Path(report).write_text(
        json.dumps({"applied_slots": applied_slots, "created": created, "stale": stale})
    )


if __name__ == "__main__":
    main()
