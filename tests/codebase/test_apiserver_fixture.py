"""The kube_apiserver fixture is a real apiserver: it stores, authenticates and authorizes."""

from __future__ import annotations

import subprocess

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.fixtures_kube import KubeApiserver, kubectl_path

pytestmark = pytest.mark.apiserver


def test_a_configmap_created_in_the_test_namespace_reads_back_unchanged(
    kube_apiserver: KubeApiserver, kube_namespace: str
) -> None:
    with kube_apiserver.api_client() as api:
        core = client.CoreV1Api(api)
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="settings"), data={"queue": "emails"}
        )
        core.create_namespaced_config_map(kube_namespace, body)
        read = core.read_namespaced_config_map("settings", kube_namespace)
    assert read.data == {"queue": "emails"}


def test_kubectl_with_the_fixture_kubeconfig_reaches_the_same_apiserver(
    kube_apiserver: KubeApiserver, kube_namespace: str
) -> None:
    result = subprocess.run(
        [kubectl_path(), "get", "namespace", kube_namespace, "-o", "jsonpath={.status.phase}"],
        env=kube_apiserver.env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert result.stdout == "Active"


def test_a_request_without_the_admin_token_is_refused(kube_apiserver: KubeApiserver) -> None:
    configuration = client.Configuration()
    configuration.host = kube_apiserver.server
    configuration.ssl_ca_cert = str(kube_apiserver.ca_file)
    with client.ApiClient(configuration) as api, pytest.raises(ApiException) as refused:
        client.CoreV1Api(api).list_namespace()
    assert refused.value.status in (401, 403)


def test_a_service_account_without_rbac_rules_is_forbidden_to_list_pods(
    kube_apiserver: KubeApiserver, kube_namespace: str
) -> None:
    with kube_apiserver.api_client() as api:
        review = client.AuthorizationV1Api(api).create_subject_access_review(
            client.V1SubjectAccessReview(
                spec=client.V1SubjectAccessReviewSpec(
                    user=f"system:serviceaccount:{kube_namespace}:default",
                    resource_attributes=client.V1ResourceAttributes(
                        namespace=kube_namespace, verb="list", resource="pods"
                    ),
                )
            )
        )
    assert review.status is not None
    assert review.status.allowed is False
