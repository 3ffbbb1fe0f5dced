"""The kustomize manifests build, and say what the install needs (no cluster required)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from taskfleet.protocol.redisurl import parse_redis_url
from taskfleet_operator import builders, crdgen
from taskfleet_operator.models import TaskQueueSpec

from tests.fixtures_kube import KubeApiserver, kubectl_path
from tests.fixtures_operator import APISERVER_INTERVAL_S, APISERVER_TIMEOUT_S, kubectl
from tests.manifests import MANIFESTS, REPO, admitted, by_kind, kustomize, selects
from tests.needs import unless
from tests.polling import wait_for

QUEUE = "taskfleet.dev/queue"

OPERATOR_SOURCE = REPO / "operator" / "taskfleet_operator"

pytestmark = unless(shutil.which("kubectl"), reason="needs kubectl")


def test_the_install_holds_the_crd_rbac_operator_and_redis_in_taskfleet_system() -> None:
    docs = by_kind(kustomize(MANIFESTS))

    assert docs[("CustomResourceDefinition", crdgen.CRD_NAME)] == crdgen.build_crd()
    for key in [
        ("Namespace", "taskfleet-system"),
        ("ServiceAccount", "taskfleet-operator"),
        ("ClusterRole", "taskfleet-operator"),
        ("ClusterRoleBinding", "taskfleet-operator"),
        ("Deployment", "taskfleet-operator"),
        ("Deployment", "redis"),
        ("Service", "redis"),
        ("Secret", "redis-auth"),
        ("NetworkPolicy", "redis"),
        ("ValidatingAdmissionPolicy", "taskfleet-operator-writes"),
        ("CustomResourceDefinition", "clusterkopfpeerings.kopf.dev"),
        ("PodDisruptionBudget", "taskfleet-operator"),
    ]:
        assert key in docs, key
    for doc in docs.values():
        if doc["kind"] in ("ServiceAccount", "Deployment", "Service", "Secret", "NetworkPolicy"):
            assert doc["metadata"]["namespace"] == "taskfleet-system", doc["metadata"]["name"]


def test_the_operator_runs_two_restricted_replicas_with_liveness_on_its_own_account() -> None:
    operator = by_kind(kustomize(MANIFESTS))[("Deployment", "taskfleet-operator")]
    pod = operator["spec"]["template"]["spec"]
    container = pod["containers"][0]

    # two replicas, one active through kopf's peering; a rollout never leaves none
    assert operator["spec"]["replicas"] == 2
    assert operator["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    env = {e["name"]: e for e in container["env"]}
    assert env["TASKFLEET_PEERING"]["value"] == "taskfleet"
    assert env["POD_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert pod["serviceAccountName"] == "taskfleet-operator"
    assert container["image"] == "localhost/taskfleet-operator:dev"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def test_the_sample_redis_image_is_local_and_never_pulled_when_present() -> None:
    redis = by_kind(kustomize(MANIFESTS / "redis"))[("Deployment", "redis")]
    container = redis["spec"]["template"]["spec"]["containers"][0]
    base = yaml.safe_load((MANIFESTS / "redis" / "deployment.yaml").read_text())

    assert base["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "localhost/taskfleet-redis:dev"
    )
    # The tag is the kustomization's to choose (the local builds produce a versioned one).
    assert container["image"].startswith("localhost/taskfleet-redis:")
    assert container["imagePullPolicy"] == "IfNotPresent"


def test_every_rbac_rule_is_commented() -> None:
    text = (MANIFESTS / "rbac" / "cluster_role.yaml").read_text()
    blocks = text.split("rules:", 1)[1].strip().split("\n\n")
    assert len(blocks) >= 8
    for block in blocks:
        assert block.lstrip().startswith("#"), block


def test_every_sample_taskqueue_is_a_valid_spec() -> None:
    docs = kustomize(MANIFESTS / "samples")
    queues = [doc for doc in docs if doc["kind"] == "TaskQueue"]

    assert queues
    for queue in queues:
        TaskQueueSpec.model_validate(queue["spec"])


def test_the_whole_install_passes_server_side_validation(
    kube_apiserver: KubeApiserver, taskqueue_crd: str
) -> None:
    kubectl(kube_apiserver, "apply", "-f", str(MANIFESTS / "namespace.yaml"))

    result = kubectl(kube_apiserver, "apply", "-k", str(MANIFESTS), "--dry-run=server")

    assert "deployment.apps/taskfleet-operator" in result.stdout
    assert "clusterrole.rbac.authorization.k8s.io/taskfleet-operator" in result.stdout
    samples = kubectl(kube_apiserver, "apply", "-k", str(MANIFESTS / "samples"), "--dry-run=server")
    assert "taskqueue.taskfleet.dev/" in samples.stdout


# ----------------------------------------------------------------------------- RBAC

Grant = tuple[str, str]  # (apiGroup, resource)

# The most the operator's ClusterRole may ever grant. Widening it is a decision: change
# this table, the rule's comment and docs/operator.md together.
ALLOWED: dict[Grant, set[str]] = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
    ("taskfleet.dev", "taskqueues"): {"list", "watch", "patch"},
    ("taskfleet.dev", "taskqueues/status"): {"patch"},
    ("taskfleet.dev", "taskqueues/finalizers"): {"update"},
    ("taskfleet.dev", "providerquotas"): {"list", "watch", "patch"},
    ("taskfleet.dev", "providerquotas/status"): {"patch"},
    ("apps", "deployments"): {"get", "list", "watch", "create", "patch"},
    ("", "pods"): {"get", "list", "watch", "patch"},
    ("", "secrets"): {"get"},
    ("", "events"): {"create"},
    ("kopf.dev", "clusterkopfpeerings"): {"list", "watch", "patch", "create"},
}

# What each Kubernetes client method the operator calls needs. A call missing here fails
# the test below: grant it (or find a narrower call) and add it.
CLIENT_CALLS: dict[str, tuple[Grant, set[str]]] = {
    "read_namespaced_deployment": (("apps", "deployments"), {"get"}),
    # Server-side apply: a patch, which creates the Deployment when it does not exist.
    "patch_namespaced_deployment": (("apps", "deployments"), {"patch", "create"}),
    "list_namespaced_pod": (("", "pods"), {"list"}),
    "read_namespaced_pod": (("", "pods"), {"get"}),
    "patch_namespaced_pod": (("", "pods"), {"patch"}),
    "read_namespaced_secret": (("", "secrets"), {"get"}),
    # The peering object the replicas meet in, created when missing.
    "create_cluster_custom_object": (("kopf.dev", "clusterkopfpeerings"), {"create"}),
    # A sweep's status of its TaskQueue, and the autoscaler's decision.
    "patch_namespaced_custom_object_status": (("taskfleet.dev", "taskqueues/status"), {"patch"}),
}
# What kopf needs for the resources handlers and indexes are registered on.
KOPF_WATCHED: dict[str, Grant] = {
    "pods": ("", "pods"),
    "deployments": ("apps", "deployments"),
    "*TASKQUEUES": ("taskfleet.dev", "taskqueues"),
    "*PROVIDERQUOTAS": ("taskfleet.dev", "providerquotas"),
}


def cluster_role_grants() -> dict[Grant, set[str]]:
    role = yaml.safe_load((MANIFESTS / "rbac" / "cluster_role.yaml").read_text())
    grants: dict[Grant, set[str]] = {}
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


def needed_by_code() -> dict[Grant, set[str]]:
    """Every grant the operator's code needs, read from its source."""
    needed: dict[Grant, set[str]] = {
        # kopf itself: CRD watch (resource discovery), and for every TaskQueue handler its
        # watch, its finalizer and progress annotations, status patches and events.
        ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
    }
    unknown = []
    for path in sorted(OPERATOR_SOURCE.glob("*.py")):
        text = path.read_text()
        # Called (``core().read_namespaced_pod(...)``) or passed to ``kube._raw``.
        for method in re.findall(r"\b(?:core|apps|custom)\(\)\.(\w+)\b", text):
            if method not in CLIENT_CALLS:
                unknown.append(f"{path.name}: {method}")
                continue
            grant, verbs = CLIENT_CALLS[method]
            needed.setdefault(grant, set()).update(verbs)
        for target in re.findall(r"@kopf\.(?:index|on\.\w+|timer|daemon)\((\*?\w+|\"\w+\")", text):
            watched = KOPF_WATCHED.get(target.strip('"'))
            if watched is None:
                unknown.append(f"{path.name}: kopf handler on {target}")
                continue
            needed.setdefault(watched, set()).update({"list", "watch"})
            if target in ("*TASKQUEUES", "*PROVIDERQUOTAS"):
                needed[watched].add("patch")  # finalizer, progress annotations
                needed.setdefault((watched[0], f"{watched[1]}/status"), set()).add("patch")
        if re.search(r"\bkopf\.(?:event|warn|info|exception)\(", text):
            needed.setdefault(("", "events"), set()).add("create")
        if "settings.peering.name = " in text:  # kopf's peering: observe, keep alive
            needed.setdefault(("kopf.dev", "clusterkopfpeerings"), set()).update(
                {"list", "watch", "patch"}
            )
        if "kopf.adopt(" in text:  # blockOwnerDeletion on the owner reference
            needed.setdefault(("taskfleet.dev", "taskqueues/finalizers"), set()).add("update")
    assert not unknown, f"API calls this test does not know (grant and list them): {unknown}"
    return needed


def test_the_operator_role_grants_nothing_beyond_its_allow_list() -> None:
    grants = cluster_role_grants()

    for grant, verbs in grants.items():
        assert grant in ALLOWED, f"{grant} is not in the allow-list"
        assert verbs <= ALLOWED[grant], f"{grant}: {verbs - ALLOWED[grant]} beyond the allow-list"
        assert "*" not in verbs and "*" not in grant
    # Reading one Secret by name is all the operator does: never list or watch them.
    assert grants[("", "secrets")] == {"get"}
    # Nothing is ever deleted, updated or escalated by the operator itself.
    every_verb = set().union(*grants.values())
    assert not every_verb & {"delete", "deletecollection", "escalate", "bind", "impersonate"}
    assert grants[("taskfleet.dev", "taskqueues/finalizers")] == {"update"}


def test_every_api_call_in_the_code_is_granted_and_every_grant_is_used() -> None:
    grants = cluster_role_grants()
    needed = needed_by_code()

    missing = {g: v - grants.get(g, set()) for g, v in needed.items() if v - grants.get(g, set())}
    unused = {g: v - needed.get(g, set()) for g, v in grants.items() if v - needed.get(g, set())}
    assert not missing, f"the code needs, the ClusterRole lacks: {missing}"
    assert not unused, f"the ClusterRole grants, no code uses: {unused}"


def admission_policy() -> tuple[dict[str, Any], dict[str, Any]]:
    docs = by_kind(kustomize(MANIFESTS / "rbac"))
    return (
        docs[("ValidatingAdmissionPolicy", "taskfleet-operator-writes")],
        docs[("ValidatingAdmissionPolicyBinding", "taskfleet-operator-writes")],
    )


def test_the_admission_policy_covers_every_write_rbac_grants_on_other_workloads() -> None:
    policy, binding = admission_policy()
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    covered = {
        (group, resource, operation)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for operation in rule["operations"]
    }

    # deployments create/patch and pods patch: granted for every object of the kind.
    assert {("apps", "deployments", "CREATE"), ("apps", "deployments", "UPDATE")} <= covered
    assert ("", "pods", "UPDATE") in covered
    assert policy["spec"]["failurePolicy"] == "Fail"
    condition = policy["spec"]["matchConditions"][0]["expression"]
    assert ":taskfleet-operator'" in condition
    assert binding["spec"] == {
        "policyName": "taskfleet-operator-writes",
        "validationActions": ["Deny"],
    }


def as_operator(
    server: KubeApiserver, kubeconfig: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl with the operator's ServiceAccount token (RBAC and admission as installed)."""
    env = {**server.env(), "KUBECONFIG": str(kubeconfig)}
    return subprocess.run(
        [kubectl_path(), *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_operator_account_may_set_only_the_deletion_cost_and_guard_of_worker_pods(
    kube_apiserver: KubeApiserver, operator_kubeconfig: Path, kube_namespace: str
) -> None:
    def pod(name: str, labels: dict[str, str]) -> str:
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": labels, "annotations": {"a": "b"}},
                "spec": {"containers": [{"name": "worker", "image": "localhost/none:dev"}]},
            }
        )

    ns = ["-n", kube_namespace]
    kubectl(kube_apiserver, *ns, "apply", "-f", "-", stdin=pod("worker", {QUEUE: "q"}))
    kubectl(kube_apiserver, *ns, "apply", "-f", "-", stdin=pod("other", {"app": "x"}))
    cost = '{"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "3"}}}'
    probe = ["patch", "pod", "other", "--type=merge", "-p", cost, "--dry-run=server"]
    # The apiserver enforces a policy a moment after it is created (its informer).
    wait_for(
        lambda: as_operator(kube_apiserver, operator_kubeconfig, *ns, *probe).returncode != 0,
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the admission policy in force",
    )

    allowed = as_operator(
        kube_apiserver,
        operator_kubeconfig,
        *ns,
        "patch",
        "pod",
        "worker",
        "--type=merge",
        "-p",
        cost,
    )
    not_a_worker = as_operator(
        kube_apiserver,
        operator_kubeconfig,
        *ns,
        "patch",
        "pod",
        "other",
        "--type=merge",
        "-p",
        cost,
    )
    image = as_operator(
        kube_apiserver,
        operator_kubeconfig,
        *ns,
        "patch",
        "pod",
        "worker",
        "--type=json",
        "-p",
        '[{"op": "replace", "path": "/spec/containers/0/image", "value": "evil"}]',
    )
    guard = as_operator(
        kube_apiserver,
        operator_kubeconfig,
        *ns,
        "annotate",
        "pod",
        "worker",
        "karpenter.sh/do-not-disrupt=true",
        "cluster-autoscaler.kubernetes.io/safe-to-evict=false",
    )
    unguard = as_operator(
        kube_apiserver,
        operator_kubeconfig,
        *ns,
        "annotate",
        "pod",
        "worker",
        "karpenter.sh/do-not-disrupt-",
        "cluster-autoscaler.kubernetes.io/safe-to-evict-",
    )
    relabel = as_operator(
        kube_apiserver, operator_kubeconfig, *ns, "label", "pod", "worker", "app=stolen"
    )
    annotate = as_operator(
        kube_apiserver,
        operator_kubeconfig,
        *ns,
        "annotate",
        "pod",
        "worker",
        "a=changed",
        "--overwrite",
    )

    assert allowed.returncode == 0, allowed.stderr
    assert guard.returncode == 0, guard.stderr
    assert unguard.returncode == 0, unguard.stderr
    assert "may change only worker pods" in not_a_worker.stderr
    for refused in (image, relabel, annotate):
        assert refused.returncode != 0
        assert "may change only the controller.kubernetes.io/pod-deletion-cost" in refused.stderr
    # The admin (anyone but the operator) is not affected by the policy.
    kubectl(kube_apiserver, *ns, "label", "pod", "other", "app=y", "--overwrite")


def test_the_operator_account_may_write_only_deployments_a_taskqueue_controls(
    kube_apiserver: KubeApiserver, operator_kubeconfig: Path, kube_namespace: str
) -> None:
    def deployment(owner: list[dict[str, Any]]) -> str:
        return json.dumps(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "q", "labels": {QUEUE: "q"}, "ownerReferences": owner},
                "spec": {
                    "selector": {"matchLabels": {QUEUE: "q"}},
                    "template": {
                        "metadata": {"labels": {QUEUE: "q"}},
                        "spec": {"containers": [{"name": "w", "image": "localhost/none:dev"}]},
                    },
                },
            }
        )

    owned = [
        {
            "apiVersion": "taskfleet.dev/v1alpha1",
            "kind": "TaskQueue",
            "name": "q",
            "uid": "00000000-0000-4000-8000-000000000002",
            "controller": True,
        }
    ]
    create = ["-n", kube_namespace, "create", "--dry-run=server", "-f", "-"]
    wait_for(
        lambda: (
            as_operator(
                kube_apiserver, operator_kubeconfig, *create, stdin=deployment([])
            ).returncode
            != 0
        ),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the admission policy in force",
    )

    ours = as_operator(kube_apiserver, operator_kubeconfig, *create, stdin=deployment(owned))
    bare = as_operator(kube_apiserver, operator_kubeconfig, *create, stdin=deployment([]))
    foreign = [{**owned[0], "kind": "ReplicaSet", "apiVersion": "apps/v1"}]
    other = as_operator(kube_apiserver, operator_kubeconfig, *create, stdin=deployment(foreign))

    assert ours.returncode == 0, ours.stderr
    for refused in (bare, other):
        assert refused.returncode != 0
        assert "only Deployments controlled by the TaskQueue of the same name" in refused.stderr


# ----------------------------------------------------------------------------- sample Redis


def secret_value(secret: dict[str, Any], key: str) -> str:
    return base64.b64decode(secret["data"][key]).decode()


def test_the_sample_redis_requires_the_password_of_its_secret() -> None:
    docs = by_kind(kustomize(MANIFESTS))
    container = docs[("Deployment", "redis")]["spec"]["template"]["spec"]["containers"][0]
    password = secret_value(docs[("Secret", "redis-auth")], "password")

    args = container["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    assert {
        "name": "REDIS_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "redis-auth", "key": "password"}},
    } in container["env"]
    assert password not in json.dumps(docs[("Deployment", "redis")])
    assert len(password) >= 16


def test_the_sample_taskqueues_reach_the_sample_redis_through_a_secret_with_its_password() -> None:
    install = by_kind(kustomize(MANIFESTS))
    samples = kustomize(MANIFESTS / "samples")
    queues = [doc for doc in samples if doc["kind"] == "TaskQueue"]
    secrets = {doc["metadata"]["name"]: doc for doc in samples if doc["kind"] == "Secret"}

    assert queues
    for queue in queues:
        ref = queue["spec"]["redis"]["secretRef"]
        assert "url" not in queue["spec"]["redis"]
        secret = secrets[ref["name"]]
        assert secret["metadata"]["namespace"] == queue["metadata"]["namespace"]
        url = parse_redis_url(secret_value(secret, ref["key"]))
        assert (url.host, url.port, url.db) == ("redis.taskfleet-system.svc", 6379, 0)
        assert url.password == secret_value(install[("Secret", "redis-auth")], "password")


def test_only_taskqueue_workers_and_the_operator_may_connect_to_the_sample_redis() -> None:
    docs = by_kind(kustomize(MANIFESTS))
    policy = docs[("NetworkPolicy", "redis")]
    redis_pod = docs[("Deployment", "redis")]["spec"]["template"]["metadata"]["labels"]
    operator_pod = docs[("Deployment", "taskfleet-operator")]["spec"]["template"]["metadata"][
        "labels"
    ]
    sample = next(d for d in kustomize(MANIFESTS / "samples") if d["kind"] == "TaskQueue")
    spec = TaskQueueSpec.model_validate(sample["spec"])
    worker_pod = builders.pod_template("default", sample["metadata"]["name"], spec)["metadata"][
        "labels"
    ]

    assert selects(policy["spec"]["podSelector"], redis_pod)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert admitted(policy, worker_pod, "default")
    assert admitted(policy, operator_pod, "taskfleet-system")
    assert not admitted(policy, {"app": "curious"}, "default")
    assert not admitted(policy, {"app.kubernetes.io/name": "redis"}, "default")
    assert not admitted(policy, operator_pod, "default")  # the operator's labels elsewhere
    for rule in policy["spec"]["ingress"]:
        assert rule["ports"] == [{"protocol": "TCP", "port": 6379}]
