"""The protocol: what producers, workers and the operator share.

Redis key names (``keys``), the queue's shared settings (``config``), the Lua scripts and
their typed calls (``scripts``, ``lua/``), the task model (``tasks``), the bounds on every
stored time and number (``bounds``), the library's errors (``errors``) and Redis URLs
(``redisurl``). It imports nothing of taskfleet outside itself; everything else may
import it.
"""
