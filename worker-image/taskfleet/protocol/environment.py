"""Environment variable names: the contract between the operator's pods and the worker.

Every ``taskfleet`` option can come from ``TASKFLEET_<OPTION>``; the operator sets these
on the worker pods it builds (and refuses them in a TaskQueue's ``env``, where they would
fight its own). Defined here once: the CLI reads them, the operator writes them.
"""

from __future__ import annotations

PREFIX = "TASKFLEET_"

QUEUE = "TASKFLEET_QUEUE"
HANDLER = "TASKFLEET_HANDLER"
CONCURRENCY = "TASKFLEET_CONCURRENCY"
PROCESSES = "TASKFLEET_PROCESSES"
PREFETCH = "TASKFLEET_PREFETCH"
DRAIN_TIMEOUT = "TASKFLEET_DRAIN_TIMEOUT"
HELD_GRACE = "TASKFLEET_HELD_GRACE"
HEARTBEAT_INTERVAL = "TASKFLEET_HEARTBEAT_INTERVAL"
LEASE_TTL = "TASKFLEET_LEASE_TTL"
TASK_TIMEOUT = "TASKFLEET_TASK_TIMEOUT"
POD_NAME = "TASKFLEET_POD_NAME"
RUNTIME_DIR = "TASKFLEET_RUNTIME_DIR"
REDIS_URL = "TASKFLEET_REDIS_URL"
LOG_FORMAT = "TASKFLEET_LOG_FORMAT"
LOG_LEVEL = "TASKFLEET_LOG_LEVEL"
FIRE_SCHEDULES = "TASKFLEET_FIRE_SCHEDULES"
ALLOW_EVICTION = "TASKFLEET_ALLOW_EVICTION"
METRICS_PORT = "TASKFLEET_METRICS_PORT"
ISOLATION = "TASKFLEET_ISOLATION"
MAX_TASKS_PER_CHILD = "TASKFLEET_MAX_TASKS_PER_CHILD"
APP_DIR = "TASKFLEET_APP_DIR"

#: What the operator sets on every worker pod, or owns through a spec field
#: (``isolation``, ``maxTasksPerChild``): a TaskQueue's ``env`` may not.
SET_BY_OPERATOR = (
    QUEUE,
    HANDLER,
    CONCURRENCY,
    PROCESSES,
    DRAIN_TIMEOUT,
    HEARTBEAT_INTERVAL,
    LEASE_TTL,
    REDIS_URL,
    POD_NAME,
    RUNTIME_DIR,
    METRICS_PORT,
    ISOLATION,
    MAX_TASKS_PER_CHILD,
)
