"""The example application's handler: it uses a package its requirements.txt installs."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import humanize


def describe_size(payload: dict[str, Any]) -> dict[str, str]:
    """``{"bytes": N}`` -> N in words, and which humanize said so."""
    return {
        "size": humanize.naturalsize(payload["bytes"]),
        "humanize": version("humanize"),
    }
