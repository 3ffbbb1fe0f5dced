"""The protocol: what producers, workers and the operator share.

Redis key names (``keys``) and the stored records' fields (``records``), the queue's
shared settings (``config``), the Lua scripts and their typed calls (``scripts``,
``lua/``), every read and plain write as a typed call (``reads``, ``lists``, ``store``,
sent by ``calls``), the task model (``tasks``), the bounds on every stored time and
number (``bounds``), the library's errors (``errors``) and Redis URLs (``redisurl``).
No other package spells a key or a field. It imports nothing of taskfleet outside
itself; everything else may import it.
"""
