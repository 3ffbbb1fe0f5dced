"""A real Prometheus server for tests (fast tier and e2e): started with a scrape config,
asked with PromQL over its HTTP API (``/api/v1/query``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.fixtures_redis import free_port

PROMETHEUS = shutil.which("prometheus")
#: Prometheus starts, scrapes every 200 ms, and evaluates: seconds, not milliseconds.
PROMETHEUS_TIMEOUT_S = 30.0
PROMETHEUS_INTERVAL_S = 0.2


def static_job(name: str, *targets: str) -> dict[str, Any]:
    return {"job_name": name, "static_configs": [{"targets": list(targets)}]}


class Prometheus:
    """A prometheus process scraping ``jobs`` (scrape configs), until ``close``."""

    def __init__(self, workdir: Path, jobs: list[dict[str, Any]], *, every: str = "200ms") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": every, "evaluation_interval": "1s"},
            "scrape_configs": jobs,
        }
        (workdir / "prometheus.yml").write_text(json.dumps(config))  # YAML reads JSON
        self.log = workdir / "prometheus.log"
        assert PROMETHEUS is not None
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={workdir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def query(self, promql: str) -> list[dict[str, object]]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=2) as reply:
            body = json.loads(reply.read())
        assert body["status"] == "success", body
        result: list[dict[str, object]] = body["data"]["result"]
        return result

    def scalar(self, promql: str) -> float | None:
        """The value of a query that yields one series (None: no series yet)."""
        result = self.query(promql)
        if not result:
            return None
        assert len(result) == 1, result
        value = result[0]["value"]
        assert isinstance(value, list)
        return float(value[1])

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
