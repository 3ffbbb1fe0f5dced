"""Knobs bounded whatever is asked: a lease TTL below the floor in a queue's stored config
(a hand edit, an older version) neither makes a worker beat faster than the floor nor
breaks the readers of that config."""

from __future__ import annotations

import signal

import pytest
import redis
from pydantic import ValidationError
from taskfleet.producer.queue import Queue
from taskfleet.protocol import bounds
from taskfleet.protocol.config import QueueConfig

from tests.workers.harness import Fleet


def test_a_stored_lease_ttl_below_the_floor_makes_the_worker_beat_at_the_floor_not_faster(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    redis_client.hset(queue.keys.config, "lease_ttl_s", "0.01")
    worker = fleet.add("tests.workers.handlers:sleep", args=["--heartbeat-interval", "5"]).start()
    worker.wait_event("heartbeat_shortened", heartbeat_interval_s=bounds.MIN_HEARTBEAT_S)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log_text()


def test_a_stored_config_the_model_now_refuses_reads_as_stored_and_never_fails(
    queue: Queue, redis_client: redis.Redis
) -> None:
    redis_client.hset(queue.keys.config, mapping={"lease_ttl_s": "0.01", "max_attempts": "x"})
    config = queue.config()
    assert config.lease_ttl_s == 0.01  # what the scripts read, shown as it is
    assert config.max_attempts == QueueConfig().max_attempts  # not a number: the default


def test_the_model_refuses_a_lease_ttl_below_the_floor() -> None:
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        QueueConfig(lease_ttl_s=0.01)
