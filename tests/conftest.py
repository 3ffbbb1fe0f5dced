"""Shared fixtures live in topic modules; this file only wires them in."""

pytest_plugins = [
    "tests.fixtures_redis",
    "tests.fixtures_redis_cluster",
    "tests.fixtures_kube",
    "tests.fixtures_operator",
    "tests.fixtures_cluster",
    "tests.fixtures_previous",
    "tests.workers.harness",
]
