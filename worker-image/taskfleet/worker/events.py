"""One structured log line per event; the CLI's formatter renders ``key=value`` or JSON."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("taskfleet.worker")


def log_event(level: int, event: str, **fields: Any) -> None:
    log.log(level, event, extra={"fields": fields})
