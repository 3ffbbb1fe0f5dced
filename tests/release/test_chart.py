"""The Helm chart (charts/taskfleet): lint, values in -> objects out, the schema, installs.

Each rendering case renders the chart with the pinned helm (tests/helm.py) and compares
every object with the expected manifests committed in tests/chart_expected/<case>.yaml.
After a deliberate change to the chart, regenerate them with
``TASKFLEET_UPDATE_CHART_EXPECTED=1 .venv/bin/pytest tests/release/test_chart.py -k renders`` and
review the diff: it is the change users will see.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures_kube import KubeApiserver
from tests.fixtures_operator import kubectl
from tests.helm import CHART, REPO, helm

EXPECTED = Path(__file__).resolve().parents[1] / "chart_expected"
RELEASE, NAMESPACE = "taskfleet", "taskfleet-system"
VAP = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
DIGEST = "sha256:" + "ab" * 32

#: case -> (values, extra `helm template` flags). The flags stand for the cluster: a
#: 1.30+ cluster serves ValidatingAdmissionPolicy, an older one (no flag) does not.
CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "default": ({}, []),
    "default-k8s-1.30": ({}, ["--api-versions", VAP]),
    "namespaces": (
        {"watchNamespaces": ["team-a", "team-b"], "rbac": {"secrets": {"names": ["redis-url"]}}},
        ["--api-versions", VAP],
    ),
    "namespace-pattern": ({"watchNamespaces": ["team-*"]}, []),
    "single-replica": ({"operator": {"replicas": 1}, "rbac": {"secrets": {"enabled": False}}}, []),
    "monitoring": (
        {
            "metrics": {"service": {"enabled": True}},
            "monitoring": {
                "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
                "podMonitor": {"enabled": True, "processes": 2},
                "prometheusRule": {"enabled": True},
                "grafanaDashboard": {"enabled": True},
            },
        },
        [],
    ),
    "dashboard": (
        {
            "dashboard": {
                "enabled": True,
                "redisSecret": {"name": "dashboard-redis"},
                "actions": True,
                "tokenSecret": {"name": "dashboard-token"},
            }
        },
        [],
    ),
    "admission-forced": ({"admissionPolicy": {"enabled": True}}, []),
    "admission-off": ({"admissionPolicy": {"enabled": False}}, ["--api-versions", VAP]),
    "digest": (
        {
            "image": {
                "registry": "registry.example.com/platform",
                "tag": "0.2.0",
                "digest": DIGEST,
            },
            "imagePullSecrets": [{"name": "regcred"}],
            "operator": {"settings": {"sweepInterval": 5, "sweepThreads": 8}},
        },
        [],
    ),
    "demo-redis": (
        {"demoRedis": {"enabled": True, "passwordSecret": {"name": "my-redis-auth"}}},
        [],
    ),
}


def render(
    values: dict[str, Any], *flags: str, namespace: str = NAMESPACE, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`helm template` of the chart; values go through a file, as users pass them (-f), so
    their types stay as written."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(values, file)
        file.flush()
        return helm(
            "template", RELEASE, str(CHART), "--namespace", namespace,
            "--values", file.name, *flags, check=check,
        )  # fmt: skip


def objects(text: str) -> list[dict[str, Any]]:
    """The rendered objects, in a stable order (kind, namespace, name)."""
    docs = [doc for doc in yaml.safe_load_all(text) if doc]
    return sorted(
        docs,
        key=lambda d: (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]),
    )


def by_kind(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def case_objects(case: str) -> list[dict[str, Any]]:
    values, flags = CASES[case]
    return objects(render(values, *flags).stdout)


# -- lint ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_helm_lint_strict_passes_with_the_values_of_each_case(case: str, tmp_path: Path) -> None:
    values, _ = CASES[case]
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    result = helm("lint", "--strict", str(CHART), "--values", str(path), check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_key_of_values_yaml_is_commented() -> None:
    """The line above each key is a comment. Keys inside a free-form object (resources,
    security contexts, label maps: no properties in the schema) are its default value,
    described by the comment of the object itself."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, dict[str, Any] | None]] = [(-1, schema)]
    bare = []
    previous = ""
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        key = stripped.split(":", 1)[0]
        is_key = not stripped.startswith(("#", "-")) and ":" in stripped
        if is_key:
            indent = len(line) - len(line.lstrip())
            while stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1]
            node = (parent or {}).get("properties", {}).get(key) if parent else None
            if parent is not None and "properties" in parent and not previous.startswith("#"):
                bare.append(line)
            stack.append((indent, node))
        previous = stripped
    assert bare == []


def test_every_key_of_values_yaml_is_in_the_schema() -> None:
    """The schema refuses unknown keys, so a default the schema lacks would refuse itself."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: Any, node: dict[str, Any], path: str) -> list[str]:
        if not isinstance(value, dict) or "properties" not in node:
            return []
        missing = []
        for key, sub in value.items():
            if key not in node["properties"]:
                missing.append(f"{path}{key}")
            else:
                missing += walk(sub, node["properties"][key], f"{path}{key}.")
        return missing

    assert walk(values, schema, "") == []


# -- rendering: values in, objects out -------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_chart_renders_the_expected_objects_for_each_case(case: str) -> None:
    rendered = case_objects(case)
    path = EXPECTED / f"{case}.yaml"
    if os.environ.get("TASKFLEET_UPDATE_CHART_EXPECTED"):
        EXPECTED.mkdir(exist_ok=True)
        path.write_text(
            f"# helm template {RELEASE} charts/taskfleet -n {NAMESPACE}, case {case!r} of"
            " tests/release/test_chart.py\n"
            + yaml.safe_dump_all(rendered, sort_keys=True, width=100)
        )
    expected = objects(path.read_text())
    assert [_name(d) for d in rendered] == [_name(d) for d in expected]
    for got, want in zip(rendered, expected, strict=True):
        assert got == want, _name(got)


def _name(doc: dict[str, Any]) -> str:
    meta = doc["metadata"]
    return f"{doc['kind']} {meta.get('namespace', '-')}/{meta['name']}"


def test_default_install_is_the_operator_and_its_rbac_only() -> None:
    kinds = sorted({d["kind"] for d in case_objects("default")})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "ServiceAccount",
    ]


def test_cluster_wide_rbac_grants_exactly_the_rules_of_manifests_rbac() -> None:
    chart = by_kind(case_objects("default"))[("ClusterRole", "taskfleet-operator")]
    manifest = yaml.safe_load((REPO / "manifests/rbac/cluster_role.yaml").read_text())
    assert _rules(chart["rules"]) == _rules(manifest["rules"])


def test_namespaced_rbac_splits_the_same_rules_into_a_role_per_namespace() -> None:
    docs = case_objects("namespaces")
    manifest = yaml.safe_load((REPO / "manifests/rbac/cluster_role.yaml").read_text())
    cluster = by_kind(docs)[("ClusterRole", "taskfleet-operator")]
    roles = [d for d in docs if d["kind"] == "Role"]
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]

    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for role in roles:
        # Cluster-scoped resources stay in the ClusterRole; the rest move, Secrets by name.
        assert _rules(cluster["rules"]) | _rules(role["rules"], names=False) == _rules(
            manifest["rules"]
        )
        secrets = [r for r in role["rules"] if r["resources"] == ["secrets"]]
        assert secrets == [
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "verbs": ["get"],
                "resourceNames": ["redis-url"],
            }
        ]
    assert {r["resources"][0] for r in cluster["rules"]} == {
        "customresourcedefinitions",
        "clusterkopfpeerings",
    }
    env = _operator_env(docs)
    assert env["TASKFLEET_WATCH_NAMESPACES"] == "team-a,team-b"


def test_a_namespace_pattern_keeps_cluster_wide_rights_and_may_list_namespaces() -> None:
    docs = case_objects("namespace-pattern")
    cluster = by_kind(docs)[("ClusterRole", "taskfleet-operator")]
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding")]
    assert ("", "namespaces", "list") in _rules(cluster["rules"])
    assert ("", "secrets", "get") in _rules(cluster["rules"])


def _rules(rules: list[dict[str, Any]], names: bool = True) -> set[tuple[str, ...]]:
    return {
        (group, resource, verb, *(r.get("resourceNames", []) if names else []))
        for r in rules
        for group in r["apiGroups"]
        for resource in r["resources"]
        for verb in r["verbs"]
    }


def _operator_env(docs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = by_kind(docs)[("Deployment", "taskfleet-operator")]
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env}


def test_two_replicas_meet_in_a_peering_named_for_the_release_one_runs_standalone() -> None:
    ha = by_kind(case_objects("default"))
    assert ha[("Deployment", "taskfleet-operator")]["spec"]["replicas"] == 2
    assert _operator_env(list(ha.values()))["TASKFLEET_PEERING"] == "taskfleet"

    single = case_objects("single-replica")
    deployment = by_kind(single)[("Deployment", "taskfleet-operator")]
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert "TASKFLEET_PEERING" not in _operator_env(single)
    assert not [d for d in single if d["kind"] == "PodDisruptionBudget"]


def test_the_admission_policy_follows_the_cluster_unless_forced() -> None:
    def has_policy(case: str) -> bool:
        return any(d["kind"] == "ValidatingAdmissionPolicy" for d in case_objects(case))

    assert not has_policy("default")  # a cluster without ValidatingAdmissionPolicy (< 1.30)
    assert has_policy("default-k8s-1.30")
    assert has_policy("admission-forced")
    assert not has_policy("admission-off")


def test_the_admission_policy_keeps_the_rules_of_manifests_and_binds_this_release_only() -> None:
    docs = by_kind(case_objects("default-k8s-1.30"))
    policy = docs[("ValidatingAdmissionPolicy", "taskfleet-operator-writes")]
    binding = docs[("ValidatingAdmissionPolicyBinding", "taskfleet-operator-writes")]
    source = list(yaml.safe_load_all((REPO / "manifests/rbac/admission_policy.yaml").read_text()))
    for key in ("validations", "variables", "matchConstraints", "failurePolicy"):
        assert policy["spec"][key] == source[0]["spec"][key], key
    assert policy["spec"]["matchConditions"] == [
        {
            "name": "taskfleet-operator-only",
            "expression": "request.userInfo.username == "
            "'system:serviceaccount:taskfleet-system:taskfleet-operator'",
        }
    ]
    assert binding["spec"] == {
        "policyName": "taskfleet-operator-writes",
        "validationActions": ["Deny"],
    }


def test_a_digest_pins_the_image_and_replaces_the_tag() -> None:
    deployment = by_kind(case_objects("digest"))[("Deployment", "taskfleet-operator")]
    pod = deployment["spec"]["template"]["spec"]
    assert (
        pod["containers"][0]["image"]
        == f"registry.example.com/platform/taskfleet-operator@{DIGEST}"
    )
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]


def test_the_image_tag_defaults_to_the_app_version_the_release_sets() -> None:
    result = helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
        "--set", "image.registry=ghcr.io/example",
    )  # fmt: skip
    # appVersion is the placeholder of Chart.yaml; `helm package --app-version` replaces it.
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    deployment = by_kind(objects(result.stdout))[("Deployment", "taskfleet-operator")]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/example/taskfleet-operator:{chart['appVersion']}"


def test_every_pod_runs_under_the_restricted_pod_security_standard() -> None:
    docs = case_objects("dashboard") + case_objects("demo-redis")
    pods = [d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Deployment"]
    assert len(pods) == 4  # operator twice, dashboard, redis
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}


def test_the_dashboard_reads_its_redis_url_and_token_from_secrets_by_reference() -> None:
    deployment = by_kind(case_objects("dashboard"))[("Deployment", "taskfleet-dashboard")]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--actions" in container["command"]
    env = {e["name"]: e for e in container["env"]}
    assert set(env) == {"TASKFLEET_REDIS_URL", "TASKFLEET_DASHBOARD_TOKEN"}
    assert all("value" not in e for e in env.values())
    assert env["TASKFLEET_DASHBOARD_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "dashboard-token",
        "key": "token",
    }


def test_monitoring_objects_reuse_the_rules_and_dashboard_of_manifests_monitoring() -> None:
    docs = by_kind(case_objects("monitoring"))
    rule = docs[("PrometheusRule", "taskfleet")]
    rules = yaml.safe_load((REPO / "manifests/monitoring/rules/taskfleet.rules.yml").read_text())
    assert rule["spec"] == rules
    dashboard = docs[("ConfigMap", "taskfleet-grafana-dashboard")]
    source = (REPO / "manifests/monitoring/grafana/taskfleet.json").read_text()
    assert dashboard["data"]["taskfleet.json"] == source
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    ports = [
        e["port"] for e in docs[("PodMonitor", "taskfleet-workers")]["spec"]["podMetricsEndpoints"]
    ]
    assert ports == ["metrics", "metrics-2"]


def test_the_demo_redis_password_is_generated_per_install_and_never_a_value() -> None:
    first, second = (
        by_kind(objects(render({"demoRedis": {"enabled": True}}).stdout)) for _ in range(2)
    )
    passwords = [
        docs[("Secret", "taskfleet-redis-auth")]["data"]["password"] for docs in (first, second)
    ]
    assert passwords[0] != passwords[1]
    assert all(len(p) >= 32 for p in passwords)
    redis = first[("Deployment", "taskfleet-redis")]["spec"]["template"]["spec"]
    env = redis["containers"][0]["env"]
    assert env == [
        {
            "name": "REDIS_PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": "taskfleet-redis-auth", "key": "password"}},
        }
    ]


def test_the_copies_in_the_chart_match_their_sources() -> None:
    result = subprocess.run(
        [str(REPO / "charts" / "sync-files.sh"), "--check"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_the_crds_are_in_the_chart_crds_directory_and_nowhere_in_templates() -> None:
    names = sorted(
        yaml.safe_load(p.read_text())["metadata"]["name"] for p in (CHART / "crds").glob("*.yaml")
    )
    assert names == [
        "clusterkopfpeerings.kopf.dev",
        "providerquotas.taskfleet.dev",
        "taskqueues.taskfleet.dev",
    ]
    for case in CASES:
        assert not [d for d in case_objects(case) if d["kind"] == "CustomResourceDefinition"]


# -- values the schema or the templates refuse ------------------------------------------

REFUSED: dict[str, tuple[list[str], str]] = {
    "unknown key": (["--set", "image.tagg=1"], "tagg"),
    "zero replicas": (["--set", "operator.replicas=0"], "replicas"),
    "a tag as digest": (["--set", "image.digest=latest"], "digest"),
    "admission policy maybe": (["--set", "admissionPolicy.enabled=maybe"], "admissionPolicy"),
    "bad namespace": (["--set", "watchNamespaces={Team_A}"], "watchNamespaces"),
    "pull policy": (["--set", "image.pullPolicy=Sometimes"], "pullPolicy"),
    "dashboard without redis": (["--set", "dashboard.enabled=true"], "dashboard.redisSecret.name"),
    "actions without token": (
        ["--set", "dashboard.enabled=true,dashboard.redisSecret.name=r,dashboard.actions=true"],
        "dashboard.tokenSecret.name",
    ),
    "servicemonitor without metrics": (
        ["--set", "monitoring.serviceMonitor.enabled=true,metrics.enabled=false"],
        "metrics.enabled",
    ),
    "a password as a value": (["--set", "demoRedis.password=hunter2"], "password"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_values_that_break_the_schema_are_refused_with_a_message_naming_them(case: str) -> None:
    flags, named = REFUSED[case]
    result = render({}, *flags, check=False)
    assert result.returncode != 0
    assert result.stdout == ""
    assert named in result.stderr, result.stderr


# -- the real kube-apiserver -------------------------------------------------------------

SERVER_CASES = ["default", "default-k8s-1.30", "namespaces", "dashboard", "digest", "demo-redis"]


@pytest.mark.parametrize("case", SERVER_CASES)
def test_the_rendered_chart_is_accepted_by_the_pinned_kube_apiserver(
    case: str, kube_apiserver: KubeApiserver, kube_namespace: str
) -> None:
    values, flags = CASES[case]
    for namespace in values.get("watchNamespaces", []):
        kubectl(kube_apiserver, "create", "namespace", namespace, check=False)
    crds = kubectl(
        kube_apiserver, "apply", "--server-side", "--dry-run=server", "-f", str(CHART / "crds")
    )
    assert "serverside-applied" in crds.stdout
    rendered = render(values, *flags, namespace=kube_namespace).stdout
    result = kubectl(kube_apiserver, "apply", "--dry-run=server", "-f", "-", stdin=rendered)
    applied = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(applied) == len(objects(rendered)), result.stdout


def test_a_release_keeps_its_generated_password_on_upgrade_and_the_crds_on_uninstall(
    kube_apiserver: KubeApiserver, kube_namespace: str
) -> None:
    """A real `helm install/upgrade/uninstall` against the apiserver fixture (no
    controllers: objects are stored, nothing runs)."""
    env = kube_apiserver.env()
    release = f"rel-{kube_namespace}"
    chart = ("--namespace", kube_namespace)

    def password() -> str:
        secret = kubectl(
            kube_apiserver, "-n", kube_namespace, "get", "secret",
            f"{release}-taskfleet-redis-auth", "-o", "jsonpath={.data.password}",
        )  # fmt: skip
        return secret.stdout

    helm("install", release, str(CHART), *chart, "--set", "demoRedis.enabled=true", env=env)
    crds = ("crd/taskqueues.taskfleet.dev", "crd/clusterkopfpeerings.kopf.dev")
    kubectl(kube_apiserver, "get", *crds)
    first = password()
    assert len(first) >= 32
    # The install saw the cluster: the admission policy is there (1.30+), for this release.
    kubectl(kube_apiserver, "get", f"validatingadmissionpolicy/{release}-taskfleet-operator-writes")

    helm("upgrade", release, str(CHART), *chart, "--reuse-values", env=env)
    assert password() == first

    helm("uninstall", release, *chart, env=env)
    kubectl(kube_apiserver, "get", *crds)  # fails the test if either went
    gone = kubectl(
        kube_apiserver, "-n", kube_namespace, "get", "deployments,secrets,serviceaccounts",
        "-l", f"app.kubernetes.io/instance={release}", "-o", "name",
    )  # fmt: skip
    assert gone.stdout == ""
    roles = kubectl(kube_apiserver, "get", "clusterroles", "-o", "name").stdout.split()
    assert f"clusterrole.rbac.authorization.k8s.io/{release}-taskfleet-operator" not in roles
