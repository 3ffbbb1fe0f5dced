"""The producer API: ``Queue`` (sync) and ``AsyncQueue`` (asyncio), the same calls.

Each call is a plan written once, by feature (``enqueueing``, ``reading``, ``waiting``,
``control``, ``flowcontrol``, ``grouping``, ``quotas``, ``scheduling``, ``operating``);
``facade`` lists them and ``runner`` drives them on either client. What an enqueue takes
is checked and encoded in ``encoding`` (pure, no Redis).

Imports the protocol only. Producers, the CLI and the operator import it; the worker
never does.
"""
