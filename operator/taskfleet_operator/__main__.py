"""``python -m taskfleet_operator``: run the operator (the container's ENTRYPOINT).

Equivalent to ``kopf run -m taskfleet_operator.handlers -A
--liveness=http://0.0.0.0:8080/healthz`` with ``--standalone``, or with ``--peering NAME``
when TASKFLEET_PEERING names one (two replicas, one active), the options also read from
the environment so the Deployment can set them without a shell.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys

import kopf
from taskfleet._version import __version__

from taskfleet_operator import heap
from taskfleet_operator.settings import watched_namespaces

DEFAULT_LIVENESS = "http://0.0.0.0:8080/healthz"

# Handlers that run on every pod event or every sweep tick: kopf's "succeeded" line for
# each would drown the log (and real messages) at INFO; --verbose keeps them.
_ROUTINE = re.compile(
    r"^(Handler|Daemon|Timer|Indexer) '(worker_pod_event|worker_deployment_event|_peering_event"
    r"|track_taskqueue|sweep_while_leading|worker_pods|worker_pod_guards"
    r"|worker_deployments|taskqueue_specs|refresh_providerquota|forget_deleted_providerquota)'"
    r" succeeded\.$"
)


class _QuietRoutine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _ROUTINE.fullmatch(record.getMessage())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m taskfleet_operator", description="Run the taskfleet operator."
    )
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="Watch only this namespace (repeatable; env TASKFLEET_WATCH_NAMESPACES, "
        "comma-separated) [default: all namespaces].",
    )
    parser.add_argument(
        "--liveness",
        default=os.environ.get("TASKFLEET_LIVENESS", DEFAULT_LIVENESS),
        help="Liveness endpoint URL; empty to disable (env TASKFLEET_LIVENESS) "
        f"[default: {DEFAULT_LIVENESS}].",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="Debug logging.")
    args = parser.parse_args(argv)
    if args.namespace:  # `-n a,b` means two namespaces, as the variable does
        args.namespace = watched_namespaces(
            {"TASKFLEET_WATCH_NAMESPACES": ",".join(args.namespace)}
        )
    else:
        args.namespace = watched_namespaces()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Before any thread starts: a few malloc arenas, not one per thread (heap.py).
    heap.limit_arenas()
    # The startup handler reads them from there (`settings.configure_kopf`).
    os.environ["TASKFLEET_WATCH_NAMESPACES"] = ",".join(args.namespace)
    # kopf names itself with getpass.getuser(), which fails for a numeric uid that has no
    # passwd entry (the image runs as 10001 without one); the environment is asked first.
    if not any(os.environ.get(name) for name in ("LOGNAME", "USER", "LNAME", "USERNAME")):
        os.environ["USER"] = "taskfleet"
    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat.FULL)
    if not args.verbose:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_QuietRoutine())
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # a line per probe
    watching = ", ".join(args.namespace) or "all namespaces"
    logging.getLogger("taskfleet_operator").info(
        "taskfleet-operator %s starting, watching %s", __version__, watching
    )
    # Importing registers the handlers with kopf's default registry.
    import taskfleet_operator.handlers  # noqa: F401

    kopf.run(
        standalone=None,  # the startup handler decides: peering or standalone (settings.py)
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness or None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
