"""The producer API: ``Queue`` (enqueue, read, wait, configure, operate a queue).

- ``queue``: ``Queue``: enqueueing (one script call, however many tasks) and the
  operator's calls (configure, sweep, requeue, schedules, purge);
- ``encoding``: what an enqueue takes, validated and encoded before anything is sent
  (``EnqueueSpec``, ``enqueue_args``, ``encode_payload``): pure, no Redis;
- ``reading``: a task, the stats, the workers, waiting for tasks: plain reads, pipelined.

Imports the protocol only. Producers, the CLI and the operator import it; the worker
never does.
"""
