"""asynq: its producer and worker, one Go binary built from bench/go (asynqbench)."""

from __future__ import annotations

from external import ASYNQ_BIN, ExternalAdapter, Producer, need


class AsynqAdapter(ExternalAdapter):
    name = "asynq"
    batch_method = None  # no batch API: the batched figure is left out
    worker_config = (
        "2 x `asynq.NewServer(opt, asynq.Config{})` in Go, its defaults"
        " (concurrency: the number of CPUs)"
    )

    def __init__(self, redis_url: str):
        super().__init__(Producer([str(need(ASYNQ_BIN)), "producer"], redis_url))

    def worker_argvs(self, processes: int) -> list[list[str]]:
        return [[str(ASYNQ_BIN), "worker"]] * processes


def make_adapter(redis_url: str) -> AsynqAdapter:
    return AsynqAdapter(redis_url)
