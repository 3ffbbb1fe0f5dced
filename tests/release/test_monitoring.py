"""manifests/monitoring/: every metric its alert rules and its Grafana dashboard use is one
the worker or the operator exports (read from a real run), and every expression parses
(promtool, when installed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from taskfleet.producer.queue import Queue
from taskfleet_operator.connections import Connections
from taskfleet_operator.leadership import Leadership
from taskfleet_operator.metrics import OperatorMetrics
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.providerquotas import QuotaLinks

from tests.fixtures_redis import free_port
from tests.needs import unless
from tests.polling import wait_for
from tests.scrape import value
from tests.workers.harness import FAST, WORKER_INTERVAL_S, WORKER_TIMEOUT_S, Fleet

MONITORING = Path(__file__).resolve().parents[2] / "manifests" / "monitoring"
RULES = MONITORING / "rules" / "taskfleet.rules.yml"
DASHBOARD = MONITORING / "grafana" / "taskfleet.json"
#: A metric name as PromQL writes it: ours, and the process collector's.
METRIC = re.compile(r"\b(taskfleet_[a-z0-9_]+|process_[a-z0-9_]+)\b")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def sample_names(families: Iterable[Any]) -> set[str]:
    """Every sample name a set of metric families can expose, labelled children or not."""
    names = set()
    for family in families:
        for suffix in SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def rule_exprs() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    exprs += [var["query"]["query"] for var in dashboard["templating"]["list"] if "query" in var
              and isinstance(var["query"], dict)]  # fmt: skip
    return exprs


def as_promql(expr: str) -> str:
    """A dashboard expression with Grafana's variables filled in."""
    return expr.replace("$__rate_interval", "5m").replace("$queue", ".*")


@pytest.fixture
def exported(fleet: Fleet, redis_url: str) -> set[str]:
    """What a real worker and a real operator registry export, after tasks ran."""
    with Queue("apps.jobs", redis_url=redis_url) as queue:
        queue.enqueue({})
        queue.enqueue({"raise": True}, max_attempts=1)
    port = free_port()
    fleet.queue = "apps.jobs"
    worker = fleet.add(
        "tests.workers.handlers:by_payload", args=[*FAST, "--metrics-port", str(port)]
    ).start()

    def scraped() -> str | None:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
            text: str = reply.read().decode()
        families = {
            (s.name, frozenset(s.labels.items())): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }
        done = value(families, "taskfleet_worker_tasks_total", outcome="done")
        dead = value(families, "taskfleet_worker_tasks_total", outcome="dead")
        return text if done == 1 and dead == 1 else None

    text = wait_for(
        scraped,
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"both tasks in the worker's metrics:\n{worker.log_text()}",
        ignoring=(OSError,),
    )
    names = sample_names(text_string_to_metric_families(text))
    spec = TaskQueueSpec.model_validate(
        {"image": "w:dev", "handler": "a:b", "redis": {"url": "redis://127.0.0.1:1/0"}}
    )
    connections = Connections(1.0, resolve_url=lambda _ns, _spec: redis_url)
    try:
        connections.get("apps", "jobs", spec)
        metrics = OperatorMetrics()
        metrics.watch(connections)
        leadership = Leadership(standalone=True, lifetime_s=15)
        metrics.lead(leadership)
        metrics.watch_quotas(QuotaLinks(1.0), leadership)
        names |= sample_names(metrics.registry.collect())
    finally:
        connections.close()
    return names


def test_the_alert_rules_and_their_prometheus_rule_say_the_same() -> None:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


def test_every_metric_the_rules_and_the_dashboard_use_is_exported(exported: set[str]) -> None:
    used = {name for expr in rule_exprs() + dashboard_exprs() for name in METRIC.findall(expr)}
    assert used, "no metric found in the rules and the dashboard"
    assert sorted(used - exported) == []
    # and the dashboard shows every taskfleet metric there is
    ours = {name for name in exported if name.startswith("taskfleet_")}
    shown = {name for expr in dashboard_exprs() for name in METRIC.findall(expr)}
    bases = {re.sub(r"_(bucket|count|sum)$", "", name) for name in shown}
    missing = sorted(
        name for name in ours if re.sub(r"_(bucket|count|sum)$", "", name) not in bases
    )
    assert missing == [
        "taskfleet_operator_info",  # the release, for an upgrade's side-by-side view
        "taskfleet_operator_leader",  # alerted on (TaskfleetNoOperatorLeader)
        "taskfleet_queue_cancelled_total",
        "taskfleet_queue_deferred_total",
        "taskfleet_queue_expired_total",
        "taskfleet_queue_failed_total",
        "taskfleet_queue_flow_repairs_total",  # a rare repair; logged, not yet a panel
        "taskfleet_queue_flows_total",  # flows by outcome; not yet a panel of the dashboard
        "taskfleet_queue_group_budget_left",  # per group; not yet a panel of the dashboard
        "taskfleet_queue_group_tasks",  # per group; not yet a panel of the dashboard
        "taskfleet_queue_groups_paused",  # not yet a panel of the dashboard
        "taskfleet_queue_redis_evicting",  # alerted on (TaskfleetRedisEvicting)
        "taskfleet_queue_released_total",
        "taskfleet_queue_replayed_total",
        "taskfleet_queue_requeued_total",
        "taskfleet_queue_stale_total",
        "taskfleet_queue_workers_older",  # alerted on (TaskfleetOlderWorkers)
        "taskfleet_quota_debt",  # provider quotas: not yet a panel of the dashboard
        "taskfleet_quota_limit",
        "taskfleet_quota_paused",  # alerted on (TaskfleetProviderQuotaPausedLong)
        "taskfleet_quota_redis_up",
        "taskfleet_quota_reserved",
        "taskfleet_quota_used",
        "taskfleet_worker_flow_repairs_total",  # a rare repair; logged, not yet a panel
        "taskfleet_worker_info",
        "taskfleet_worker_slots_held",  # per worker; not yet a panel of the dashboard
    ]


@unless(shutil.which("promtool"), reason="needs promtool (Debian: prometheus)")
def test_every_rule_and_dashboard_expression_parses(tmp_path: Path) -> None:
    exprs = rule_exprs() + [as_promql(e) for e in dashboard_exprs() if "label_values" not in e]
    rules = {
        "groups": [
            {
                "name": "parse",
                "rules": [{"record": f"check:expr{i}", "expr": e} for i, e in enumerate(exprs)],
            }
        ]
    }
    path = tmp_path / "exprs.yml"
    path.write_text(yaml.safe_dump(rules))
    for checked in (RULES, path):
        result = subprocess.run(
            ["promtool", "check", "rules", str(checked)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
