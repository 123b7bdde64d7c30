"""What the chart allows: RBAC exactly as the kubernetes source calls the API, the token only
where it is used, non-root read-only pods, probes, NetworkPolicy and disruption budgets."""

from __future__ import annotations

import re

import pytest

from tests.deploy.chart import (
    NAMESPACE,
    RELEASE,
    REPO,
    VALUE_SETS,
    containers,
    named,
    of_kind,
    rendered,
    values,
    workloads,
)

FULLNAME = f"{RELEASE}-gpupool"
SERVICE_ACCOUNT = {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
#: Every API method the kubernetes source calls (CoreV1Api; ResourceV1Api for Dynamic Resource
#: Allocation), and the permission it needs: (scope, api group, resource, verb).
API_CALLS = {
    "list_node": ("cluster", "", "nodes", "list"),
    "list_pod_for_all_namespaces": ("cluster", "", "pods", "list"),
    "create_namespaced_pod": ("namespace", "", "pods", "create"),
    "read_namespaced_pod": ("namespace", "", "pods", "get"),
    "delete_namespaced_pod": ("namespace", "", "pods", "delete"),
    "list_namespaced_event": ("namespace", "", "events", "list"),
    "list_resource_slice": ("cluster", "resource.k8s.io", "resourceslices", "list"),
    "list_resource_claim_for_all_namespaces": ("cluster", "resource.k8s.io", "resourceclaims", "list"),
    "create_namespaced_resource_claim": ("namespace", "resource.k8s.io", "resourceclaims", "create"),
    "read_namespaced_resource_claim": ("namespace", "resource.k8s.io", "resourceclaims", "get"),
    "delete_namespaced_resource_claim": ("namespace", "resource.k8s.io", "resourceclaims", "delete"),
}
#: The modules of the kubernetes source that call the API.
SOURCE_MODULES = ("kubernetes.py", "k8s_dra_api.py")


def _rules(role: dict[str, object]) -> set[tuple[str, str, str]]:
    """(api group, resource, verb) for every rule of a Role or ClusterRole."""
    granted = set()
    for rule in role["rules"]:  # type: ignore[attr-defined]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted |= {(group, resource, verb) for verb in rule["verbs"]}
    return granted


def _needed(scope: str) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for where, group, resource, verb in API_CALLS.values() if where == scope}


def test_the_table_of_api_calls_is_every_call_the_kubernetes_source_makes() -> None:
    """A new API call of the kubernetes source fails here until the RBAC (and this table) grant it."""
    source = "".join((REPO / "agents" / name).read_text() for name in SOURCE_MODULES)
    called = set(re.findall(r'"((?:list|read|create|delete|patch|replace|watch|connect)_[a-z_]+)"', source))
    assert called == set(API_CALLS)


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_rbac_grants_exactly_what_the_kubernetes_source_calls(value_set: str) -> None:
    manifests = rendered(value_set)
    [cluster_role] = of_kind(manifests, "ClusterRole")
    assert _rules(cluster_role) == _needed("cluster")
    [cluster_binding] = of_kind(manifests, "ClusterRoleBinding")
    assert cluster_binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    assert cluster_binding["subjects"] == [SERVICE_ACCOUNT]

    namespaces = values(value_set).get("rbac", {}).get("namespaces", ["gpupool-jobs"])
    roles = of_kind(manifests, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(namespaces)
    for role in roles:
        assert _rules(role) == _needed("namespace")
        binding = named([b for b in of_kind(manifests, "RoleBinding")
                         if b["metadata"]["namespace"] == role["metadata"]["namespace"]],
                        "RoleBinding", role["metadata"]["name"])
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": role["metadata"]["name"]}
        assert binding["subjects"] == [SERVICE_ACCOUNT]


def test_the_production_set_binds_pods_in_two_namespaces() -> None:
    assert sorted(r["metadata"]["namespace"] for r in of_kind(rendered("production"), "Role")) == [
        "gpupool-jobs", "research-jobs"]


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_only_the_general_worker_mounts_the_service_account_token(value_set: str) -> None:
    manifests = rendered(value_set)
    [account] = of_kind(manifests, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    for name, workload in workloads(manifests).items():
        pod = workload["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == FULLNAME
        assert pod["automountServiceAccountToken"] is (name == "worker"), name


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_pod_runs_non_root_on_a_read_only_root_with_var_and_tmp_writable(value_set: str) -> None:
    for name, workload in workloads(rendered(value_set)).items():
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        writable = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
        for container in containers(workload):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert mounts["/tmp"] in writable and mounts["/var/lib/gpupool"] in writable, name
            assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]


def test_web_is_ready_on_healthz_and_its_liveness_survives_a_database_outage() -> None:
    """/healthz answers 503 while PostgreSQL is down (pool/health.py): right for readiness (the pod
    leaves the Service), wrong for liveness (every web pod would restart at once)."""
    manifests = rendered("production")
    container = next(containers(workloads(manifests)["web"]))
    readiness = container["readinessProbe"]["httpGet"]
    assert readiness["path"] == "/healthz" and readiness["port"] == "http"
    # Django refuses a Host not in ALLOWED_HOSTS (a pod IP): the probe names the Service instead.
    [host] = [h["value"] for h in readiness["httpHeaders"] if h["name"] == "Host"]
    allowed = named(manifests, "ConfigMap", FULLNAME)["data"]["ALLOWED_HOSTS"].split(",")
    assert host in allowed and "gpupool.example.org" in allowed
    liveness = container["livenessProbe"]["httpGet"]
    assert liveness["path"] == "/healthz?probe=liveness" and host in str(liveness["httpHeaders"])
    assert container["startupProbe"]["tcpSocket"] == {"port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    service = named(manifests, "Service", f"{FULLNAME}-web")
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert service["spec"]["selector"] == workloads(manifests)["web"]["spec"]["selector"]["matchLabels"]


def test_network_policy_lets_in_only_the_web_port_and_out_only_what_each_process_reaches() -> None:
    manifests = rendered("production")
    policies = {p["metadata"]["name"].removeprefix(f"{FULLNAME}-"): p["spec"]
                for p in of_kind(manifests, "NetworkPolicy")}
    selected: dict[str, str] = {}
    for name, spec in policies.items():
        assert spec["policyTypes"] == ["Ingress", "Egress"]
        for component in spec["podSelector"]["matchExpressions"][0]["values"]:
            assert component not in selected, f"{component} is selected by two policies"
            selected[component] = name
    assert set(selected) == set(workloads(manifests))

    web = policies[selected["web"]]
    assert [r["ports"] for r in web["ingress"]] == [[{"port": 8000, "protocol": "TCP"}]]
    assert web["ingress"][0]["from"] == values("production")["networkPolicy"]["webIngressFrom"]
    for component in ("worker", "scheduler", "beat", "migrate"):
        assert policies[selected[component]]["ingress"] == [], component

    def egress_ports(component: str) -> set[int]:
        return {p["port"] for rule in policies[selected[component]]["egress"] for p in rule["ports"]}

    assert egress_ports("worker") == {53, 5432, 6379, 443, 6443, 22}
    for component in ("web", "scheduler", "beat", "migrate"):
        assert egress_ports(component) == {53, 5432, 6379}, component


def test_disruption_budgets_cover_web_workers_and_beat_without_blocking_a_drain() -> None:
    manifests = rendered("production")
    budgets = {b["metadata"]["labels"]["app.kubernetes.io/component"]: b["spec"]
               for b in of_kind(manifests, "PodDisruptionBudget")}
    assert set(budgets) == {"web", "worker", "scheduler", "beat"}
    for name, spec in budgets.items():
        assert spec["maxUnavailable"] == 1
        assert spec["selector"]["matchLabels"] == workloads(manifests)[name]["spec"]["selector"]["matchLabels"]


def test_ingress_hosts_are_allowed_and_trusted_for_forms() -> None:
    manifests = rendered("production")
    ingress = named(manifests, "Ingress", FULLNAME)
    assert [r["host"] for r in ingress["spec"]["rules"]] == ["gpupool.example.org"]
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": f"{FULLNAME}-web", "port": {"name": "http"}}
    data = named(manifests, "ConfigMap", FULLNAME)["data"]
    assert data["CSRF_TRUSTED_ORIGINS"] == "https://gpupool.example.org"


def test_the_worker_mounts_the_extra_volumes_and_no_other_process_does() -> None:
    for name, workload in workloads(rendered("production")).items():
        mounts = {m["mountPath"] for m in next(containers(workload))["volumeMounts"]}
        assert ("/etc/gpupool/ssh" in mounts) is (name == "worker"), name
