"""KubernetesConnector bind / observe / unbind and its retry budget, over real HTTP."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents.base import (
    BIND_FAILED,
    BIND_GONE,
    BIND_RUNNING,
    BIND_STARTING,
    BIND_SUCCEEDED,
    AgentError,
    BindRequest,
)
from agents.k8s_resources import gpu_uuid
from tests.support.kube import closed_port_url, connector_for, make_pod
from tests.support.kube_server import KubeApiServer

NODE = "gpu-a100-mig"
LEASE = "7c1d2e3f-0000-4000-8000-00000000abcd"
POD = f"gpupool-{LEASE}"
NS = "gpupool-jobs"


def request(manifest: dict[str, Any] | None = None, gpus: int = 2, **spec: Any) -> BindRequest:
    manifest = manifest or {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-resnet"},
        "spec": {"containers": [{"name": "main", "image": "pytorch:2.4",
                                 "command": ["python", "train.py"]}]},
    }  # fmt: skip
    return BindRequest(
        lease_id=LEASE,
        host_name=NODE,
        host_address="10.0.0.10",
        gpu_uuids=tuple(gpu_uuid(NODE, "nvidia.com/gpu", i) for i in range(gpus)),
        spec={"kind": "pod", "pod": manifest, **spec},
    )


def test_bind_creates_the_pod_on_the_leased_node_with_the_leased_gpus(
    kube_api: KubeApiServer,
) -> None:
    status = connector_for(kube_api).bind(request())

    assert status.state == BIND_STARTING
    assert {k: status.handle[k] for k in ("namespace", "name", "node")} == {
        "namespace": NS, "name": POD, "node": NODE,
    }  # fmt: skip
    pod = kube_api.pod(NS, POD)
    assert pod is not None
    assert status.handle["uid"] == pod["metadata"]["uid"]
    assert pod["spec"]["nodeName"] == NODE
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert pod["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["metadata"]["labels"] == {"gpupool.io/lease": LEASE}
    assert pod["metadata"]["annotations"]["gpupool.io/owner"] == "gpupool source test-cluster"
    assert pod["metadata"]["annotations"]["gpupool.io/requested-name"] == "train-resnet"


def test_binding_namespace_overrides_the_source_default(kube_api: KubeApiServer) -> None:
    status = connector_for(kube_api).bind(request(namespace="vision"))
    assert status.handle["namespace"] == "vision"
    assert kube_api.pod("vision", POD) is not None


def test_manifest_asking_for_more_gpus_than_leased_is_refused_before_any_call(
    kube_api: KubeApiServer,
) -> None:
    manifest = request().spec["pod"]
    manifest["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 4}}

    with pytest.raises(AgentError, match="asks for 4 GPUs but the lease holds 2") as caught:
        connector_for(kube_api).bind(request(manifest))
    assert caught.value.permanent is True
    assert kube_api.requests == []


def test_invalid_manifest_is_refused_by_the_schema(kube_api: KubeApiServer) -> None:
    manifest = request().spec["pod"]
    manifest["spec"]["containers"][0]["command"] = "python train.py"  # must be a list

    with pytest.raises(AgentError) as caught:
        connector_for(kube_api).bind(request(manifest))
    assert caught.value.permanent is True
    assert caught.value.message == (
        "the Pod manifest is invalid: spec.containers[0].command: "
        "'python train.py' is not of type 'array', 'null'"
    )
    assert kube_api.requests == []


def test_process_binding_is_refused(kube_api: KubeApiServer) -> None:
    bad = BindRequest(LEASE, NODE, "", ("g",), {"kind": "process", "command": ["x"]})
    with pytest.raises(AgentError, match="binds pods, not 'process'"):
        connector_for(kube_api).bind(bad)


def test_second_bind_adopts_the_first_pod_instead_of_duplicating(kube_api: KubeApiServer) -> None:
    connector = connector_for(kube_api)
    first = connector.bind(request())
    kube_api.set_pod_phase(NS, POD, "Running")

    second = connector.bind(request())

    assert second.state == BIND_RUNNING
    assert second.handle["uid"] == first.handle["uid"]
    assert list(kube_api.pods) == [(NS, POD)]
    assert len(kube_api.requests_to("POST", f"/api/v1/namespaces/{NS}/pods")) == 2


def test_name_taken_by_a_pod_of_someone_else_is_a_permanent_error(kube_api: KubeApiServer) -> None:
    kube_api.add_pod(make_pod(POD, NODE, 1, namespace=NS, lease="another-lease"))

    with pytest.raises(AgentError, match="does not belong to lease") as caught:
        connector_for(kube_api).bind(request())
    assert caught.value.permanent is True
    pod = kube_api.pod(NS, POD)
    assert pod is not None and pod["metadata"]["labels"]["gpupool.io/lease"] == "another-lease"


def test_create_that_timed_out_but_happened_is_adopted_on_retry(kube_api: KubeApiServer) -> None:
    kube_api.delay_next(1, 0.6, method="POST")

    status = connector_for(kube_api, request_timeout=0.3).bind(request())

    assert status.handle["name"] == POD
    assert len(kube_api.requests_to("POST", f"/api/v1/namespaces/{NS}/pods")) == 2
    time.sleep(0.4)  # let the slow first create finish on the server: it must not duplicate
    assert list(kube_api.pods) == [(NS, POD)]


def test_missing_namespace_is_a_permanent_error_with_the_api_message(
    kube_api: KubeApiServer,
) -> None:
    kube_api.namespaces = {"default"}
    with pytest.raises(AgentError, match='namespaces "gpupool-jobs" not found') as caught:
        connector_for(kube_api).bind(request())
    assert caught.value.permanent is True


def test_other_4xx_is_permanent_with_the_status_message(kube_api: KubeApiServer) -> None:
    kube_api.fail_next(1, status=422, message='Pod "x" is invalid: spec.nodeName: Invalid value')
    with pytest.raises(AgentError) as caught:
        connector_for(kube_api).bind(request())
    assert caught.value.permanent is True
    assert caught.value.message.endswith(
        'API server answered HTTP 422: Pod "x" is invalid: spec.nodeName: Invalid value'
    )
    assert len(kube_api.requests) == 1


# --- observe ------------------------------------------------------------------------------------


@pytest.fixture
def bound(kube_api: KubeApiServer) -> dict[str, Any]:
    return dict(connector_for(kube_api).bind(request()).handle)


def test_observe_follows_the_pod_phase(kube_api: KubeApiServer, bound: dict) -> None:
    connector = connector_for(kube_api)
    assert connector.observe(bound).state == BIND_STARTING
    kube_api.set_pod_phase(NS, POD, "Running")
    assert connector.observe(bound).state == BIND_RUNNING
    kube_api.set_pod_phase(NS, POD, "Succeeded", exit_code=0)

    status = connector.observe(bound)
    assert (status.state, status.exit_code, status.handle) == (BIND_SUCCEEDED, 0, bound)


def test_failed_pod_reports_exit_code_and_reason(kube_api: KubeApiServer, bound: dict) -> None:
    kube_api.set_pod_phase(NS, POD, "Failed", exit_code=3)

    status = connector_for(kube_api).observe(bound)

    assert (status.state, status.exit_code) == (BIND_FAILED, 3)
    assert status.reason == "container main exited with code 3 (Error)"


def test_pod_deleted_by_someone_else_is_gone(kube_api: KubeApiServer, bound: dict) -> None:
    kube_api.remove_pod(NS, POD)

    status = connector_for(kube_api).observe(bound)

    assert (status.state, status.reason) == (BIND_GONE, "pod deleted by someone else")


def test_pod_stuck_pending_past_the_deadline_fails_with_its_events(
    kube_api: KubeApiServer, bound: dict
) -> None:
    kube_api.set_pod_created(NS, POD, datetime.now(UTC) - timedelta(seconds=400))
    kube_api.add_event(NS, POD, "FailedMount", 'MountVolume.SetUp failed for volume "data"')
    kube_api.add_event(NS, "unrelated-pod", "BackOff", "not about our pod")
    kube_api.add_event(NS, POD, "Failed", 'Failed to pull image "pytorch:2.4": not found')

    status = connector_for(kube_api, pending_deadline_s=300).observe(bound)

    assert status.state == BIND_FAILED
    assert status.reason.startswith("pod stayed Pending for 40")
    assert status.reason.endswith(
        '(deadline 300 s): Warning FailedMount: MountVolume.SetUp failed for volume "data"; '
        'Warning Failed: Failed to pull image "pytorch:2.4": not found'
    )
    (events_call,) = kube_api.requests_to("GET", f"/api/v1/namespaces/{NS}/events")
    assert events_call.query["fieldSelector"] == f"involvedObject.name={POD}"


def test_pending_within_the_deadline_is_still_starting(
    kube_api: KubeApiServer, bound: dict
) -> None:
    kube_api.set_pod_created(NS, POD, datetime.now(UTC) - timedelta(seconds=100))
    assert connector_for(kube_api, pending_deadline_s=300).observe(bound).state == BIND_STARTING


def test_pending_deadline_falls_back_to_the_handle_without_creation_time(
    kube_api: KubeApiServer, bound: dict
) -> None:
    del kube_api.pods[(NS, POD)]["metadata"]["creationTimestamp"]  # as kmock serves pods
    old = dict(bound, created_at=(datetime.now(UTC) - timedelta(seconds=90)).isoformat())

    status = connector_for(kube_api, pending_deadline_s=60).observe(old)

    assert status.state == BIND_FAILED
    assert status.reason.endswith("(deadline 60 s): no events recorded")


# --- unbind -------------------------------------------------------------------------------------


def test_unbind_deletes_with_the_grace_period_and_twice_is_fine(
    kube_api: KubeApiServer, bound: dict
) -> None:
    connector = connector_for(kube_api)
    connector.unbind(bound, grace_s=30)
    connector.unbind(bound, grace_s=30)

    assert kube_api.pod(NS, POD) is None
    deletes = kube_api.requests_to("DELETE", f"/api/v1/namespaces/{NS}/pods/{POD}")
    assert [d.query["gracePeriodSeconds"] for d in deletes] == ["30", "30"]
    # The server takes a delete's options from its body when there is one: the grace is there too.
    assert deletes[0].body == {"gracePeriodSeconds": 30, "preconditions": {"uid": bound["uid"]}}
    assert connector.observe(bound).state == BIND_GONE


def test_unbind_leaves_a_pod_made_since_under_the_same_name_alone(
    kube_api: KubeApiServer, bound: dict
) -> None:
    kube_api.remove_pod(NS, POD)  # ours is gone; a later binding (or someone) makes another
    kube_api.add_pod({"metadata": {"name": POD, "namespace": NS, "labels": {"gpupool.io/lease": LEASE}},
                      "spec": {"containers": [{"name": "main", "image": "x"}]}})
    connector_for(kube_api).unbind(bound, grace_s=5)  # 409 on the uid precondition: done
    assert kube_api.pod(NS, POD) is not None


def test_a_pod_known_only_by_name_is_deleted_when_it_is_the_leases(kube_api: KubeApiServer) -> None:
    connector = connector_for(kube_api)
    handle = connector.bind_handle(request())
    assert handle is not None and handle["name"] == POD and not handle["uid"]
    connector.unbind(handle, grace_s=5)  # none there: nothing to do
    assert kube_api.requests_to("DELETE") == []
    connector.bind(request())
    connector.unbind(handle, grace_s=5)
    assert kube_api.pod(NS, POD) is None
    assert connector.bind_handle(BindRequest(LEASE, NODE, "", ("g",), {"kind": "process"})) is None


def test_handle_without_a_name_is_a_permanent_error(kube_api: KubeApiServer) -> None:
    with pytest.raises(AgentError, match="handle without namespace and name"):
        connector_for(kube_api).unbind({"namespace": NS}, grace_s=5)


# --- retries ------------------------------------------------------------------------------------


def test_two_server_errors_are_retried_and_the_call_succeeds(kube_api: KubeApiServer) -> None:
    kube_api.fail_next(2, status=500, method="POST")

    status = connector_for(kube_api).bind(request())

    assert status.handle["name"] == POD
    assert len(kube_api.requests_to("POST", f"/api/v1/namespaces/{NS}/pods")) == 3
    assert list(kube_api.pods) == [(NS, POD)]


def test_lasting_server_errors_give_up_as_a_transient_error(
    kube_api: KubeApiServer, bound: dict
) -> None:
    kube_api.fail_next(100, status=503, message="etcdserver: leader changed")

    with pytest.raises(AgentError) as caught:
        connector_for(kube_api).observe(bound)

    assert caught.value.permanent is False
    assert caught.value.message == (
        f"cannot read pod {NS}/{POD}: API server answered HTTP 503: "
        "etcdserver: leader changed (gave up after 4 attempts)"
    )
    assert len(kube_api.requests_to("GET", f"/api/v1/namespaces/{NS}/pods/{POD}")) == 4


def test_unreachable_api_on_unbind_is_transient() -> None:
    with pytest.raises(AgentError, match="connection refused") as caught:
        connector_for(closed_port_url()).unbind({"namespace": NS, "name": POD}, grace_s=5)
    assert caught.value.permanent is False


def test_retries_stay_inside_the_total_budget(kube_api: KubeApiServer, bound: dict) -> None:
    kube_api.delay_next(100, 1.0)
    connector = connector_for(kube_api, request_timeout=0.4)
    connector.retry_budget_s = 1.5
    connector.retry_delays = (0.1, 0.1, 0.1, 0.1, 0.1)

    started = time.monotonic()
    with pytest.raises(AgentError, match=r"no answer within 0\.\d s") as caught:
        connector.observe(bound)

    assert caught.value.permanent is False
    assert time.monotonic() - started < 2.0
