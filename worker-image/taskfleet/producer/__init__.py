"""The producer API: ``Queue`` (enqueue, read, wait, configure, operate a queue).

Imports the protocol only. Producers, the CLI and the operator import it; the worker
never does.
"""
