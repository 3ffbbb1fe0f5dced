"""The example application's handlers: one uses a package of its requirements.txt and
says which Python ran it, the other takes its time (to show a drain)."""

from __future__ import annotations

import sys
import time
from importlib.metadata import version
from typing import Any

import humanize


def describe_size(payload: dict[str, Any]) -> dict[str, str]:
    """``{"bytes": N}`` -> N in words, which humanize said so and on which Python."""
    return {
        "size": humanize.naturalsize(payload["bytes"]),
        "humanize": version("humanize"),
        "python": sys.executable,
    }


def take_time(payload: dict[str, Any]) -> dict[str, float]:
    """Sleep ``payload["seconds"]``: a task still running when the pod is told to drain."""
    time.sleep(payload["seconds"])
    return {"slept": payload["seconds"]}
