"""Pod manifest building, validation and status reading (pure, no server)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents.base import BIND_FAILED, BIND_RUNNING, BIND_STARTING, BIND_SUCCEEDED, AgentError
from agents.k8s_pod_manifest import (
    GPU_TOLERATION,
    build_pod,
    lease_label_value,
    pod_name,
    validate_pod,
)
from agents.k8s_pod_status import events_text, pod_status
from agents.k8s_resources import gpu_uuid

NODE = "gpu-a100-mig"
LEASE = "3f2a9c1e-7b4d-4e8a-9f00-0123456789ab"


def user_pod(**container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "my-training", "labels": {"team": "vision"}},
        "spec": {"containers": [{"name": "main", "image": "pytorch:2.4", **container}]},
    }


def build(manifest: Any, gpus: int = 2, **kwargs: Any) -> dict[str, Any]:
    uuids = kwargs.pop("uuids", [gpu_uuid(NODE, "nvidia.com/gpu", i) for i in range(gpus)])
    return build_pod(
        lease_id=kwargs.pop("lease_id", LEASE),
        host_name=NODE,
        gpu_uuids=uuids,
        manifest=manifest,
        namespace="gpupool-jobs",
        owner="gpupool source prod",
    )


def test_pod_is_pinned_marked_tolerated_and_given_the_leased_gpus() -> None:
    pod = build(user_pod())

    assert pod["metadata"]["name"] == f"gpupool-{LEASE}"
    assert pod["metadata"]["namespace"] == "gpupool-jobs"
    assert pod["metadata"]["labels"] == {"team": "vision", "gpupool.io/lease": LEASE}
    assert pod["metadata"]["annotations"] == {
        "gpupool.io/owner": "gpupool source prod",
        "gpupool.io/lease-id": LEASE,
        "gpupool.io/requested-name": "my-training",
        # The leased GPUs: DCGM's pod mapping tells telemetry which physical GPUs they are.
        "gpupool.io/gpus": ",".join(gpu_uuid(NODE, "nvidia.com/gpu", i) for i in range(2)),
    }
    assert pod["spec"]["nodeName"] == NODE
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["tolerations"] == [GPU_TOLERATION]
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert validate_pod(pod)["spec"]["nodeName"] == NODE


def test_user_manifest_is_not_modified() -> None:
    manifest = user_pod()
    build(manifest)
    assert manifest == user_pod()


def test_containers_asking_for_gpus_share_exactly_the_lease() -> None:
    manifest = user_pod(resources={"limits": {"nvidia.com/gpu": 1, "cpu": "4"},
                                   "requests": {"nvidia.com/gpu": 1, "cpu": "2"}})  # fmt: skip
    manifest["spec"]["containers"].append(
        {"name": "helper", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    )
    manifest["spec"]["containers"].append({"name": "logs", "image": "busybox"})
    pod = build(manifest, gpus=4)

    main, helper, logs = pod["spec"]["containers"]
    # Everything nobody asked for goes to the first asking container: the pod holds all 4.
    assert main["resources"] == {
        "limits": {"cpu": "4", "nvidia.com/gpu": "3"},
        "requests": {"cpu": "2", "nvidia.com/gpu": "3"},
    }
    assert helper["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert "resources" not in logs


def test_mig_lease_asks_for_the_mig_resource() -> None:
    uuids = [gpu_uuid(NODE, "nvidia.com/mig-1g.10gb", i) for i in range(2)]
    pod = build(user_pod(resources={"limits": {"nvidia.com/gpu": "1"}}), uuids=uuids)

    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "2"}


def test_existing_gpu_toleration_is_not_duplicated() -> None:
    manifest = user_pod()
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    manifest["spec"]["tolerations"] = tolerations
    assert build(manifest)["spec"]["tolerations"] == tolerations


def test_user_restart_policy_is_kept() -> None:
    manifest = user_pod()
    manifest["spec"]["restartPolicy"] = "OnFailure"
    assert build(manifest)["spec"]["restartPolicy"] == "OnFailure"


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (user_pod(resources={"limits": {"nvidia.com/gpu": "3"}}), "asks for 3 GPUs but the lease"),
        ({"kind": "Deployment", "spec": {}}, "not kind 'Deployment'"),
        ({"apiVersion": "apps/v1", "kind": "Pod", "spec": {"containers": [{}]}}, "apiVersion v1"),
        ({"kind": "Pod", "spec": {"containers": []}}, "has no containers"),
        ({"kind": "Pod"}, "has no spec"),
        ("not a mapping", "must be a Pod manifest"),
        (user_pod(resources={"limits": {"nvidia.com/gpu": "0.5"}}), "whole numbers"),
        ({"metadata": {"labels": ["a"]}, "spec": {"containers": [{}]}}, "labels must be a mapping"),
        ({"spec": {"containers": [{}], "tolerations": "all"}}, "tolerations must be a list"),
    ],
)
def test_bad_manifests_are_refused_permanently(manifest: Any, message: str) -> None:
    with pytest.raises(AgentError, match=message) as caught:
        build(manifest)
    assert caught.value.permanent is True


def test_manifest_pinned_to_another_node_is_refused() -> None:
    manifest = user_pod()
    manifest["spec"]["nodeName"] = "elsewhere"
    with pytest.raises(AgentError, match="pins node 'elsewhere'"):
        build(manifest)


def test_schema_errors_name_the_field() -> None:
    pod = build(user_pod(imagePullPolicy=7))
    with pytest.raises(AgentError) as caught:
        validate_pod(pod)
    assert caught.value.permanent is True
    assert caught.value.message == (
        "the Pod manifest is invalid: spec.containers[0].imagePullPolicy: "
        "7 is not of type 'string', 'null'"
    )


def test_unknown_fields_are_refused_by_the_strict_schema() -> None:
    manifest = user_pod()
    manifest["spec"]["contaners"] = []
    with pytest.raises(AgentError, match=r"spec: Additional properties .*'contaners'"):
        validate_pod(build(manifest))


@pytest.mark.parametrize(
    ("lease_id", "name"),
    [("42", "gpupool-42"), (LEASE, f"gpupool-{LEASE}"), ("Lease_7", None), ("x" * 80, None)],
)
def test_pod_names_are_dns_labels_and_deterministic(lease_id: str, name: str | None) -> None:
    made = pod_name(lease_id)
    assert made == pod_name(lease_id)
    assert len(made) <= 63 and made == made.lower() and not made.endswith("-")
    if name:
        assert made == name
    else:
        assert made.startswith("gpupool-") and made != pod_name(lease_id + "y")


def test_lease_label_value_is_the_id_or_a_stable_hash() -> None:
    assert lease_label_value(LEASE) == LEASE
    assert lease_label_value("a b") == lease_label_value("a b") != "a b"


# --- reading status -----------------------------------------------------------------------------


def status_of(phase: str, created: datetime | None = None, **status: Any):
    pod = {"metadata": {}, "status": {"phase": phase, **status}}
    if created:
        pod["metadata"]["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    return pod_status(pod, {"name": "p"}, pending_deadline_s=300, events=lambda: "Warning X: y")


def test_phases_map_to_binding_states() -> None:
    assert status_of("Running").state == BIND_RUNNING
    assert (status_of("Succeeded").state, status_of("Succeeded").exit_code) == (BIND_SUCCEEDED, 0)
    assert status_of("Unknown").state == BIND_RUNNING
    assert status_of("Pending", datetime.now(UTC)).state == BIND_STARTING


def test_failed_pod_reports_first_bad_exit_code_and_pod_reason() -> None:
    status = status_of(
        "Failed",
        reason="DeadlineExceeded",
        message="Pod was active on the node longer than the specified deadline",
        containerStatuses=[
            {"name": "ok", "state": {"terminated": {"exitCode": 0}}},
            {"name": "main", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
        ],
    )
    assert (status.state, status.exit_code) == (BIND_FAILED, 137)
    assert status.reason == (
        "container main exited with code 137 (OOMKilled); "
        "DeadlineExceeded: Pod was active on the node longer than the specified deadline"
    )


def test_pending_past_deadline_fails_with_waiting_reasons_and_events() -> None:
    waiting = [{"name": "main", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]
    status = status_of("Pending", datetime.now(UTC) - timedelta(seconds=400),
                       containerStatuses=waiting)  # fmt: skip
    assert status.state == BIND_FAILED
    assert status.reason.startswith("pod stayed Pending for 40")
    assert status.reason.endswith(
        "(deadline 300 s): container main waiting: ImagePullBackOff; Warning X: y"
    )


def test_events_text_keeps_the_latest_events_of_that_pod_only() -> None:
    events = [
        {"involvedObject": {"name": "p"}, "type": "Warning", "reason": f"R{i}", "message": f"m{i}",
         "lastTimestamp": f"2025-01-01T00:00:0{i}Z"} for i in range(7)
    ] + [{"involvedObject": {"name": "other"}, "reason": "Nope", "message": "x"}]  # fmt: skip
    assert events_text(events[::-1], "p") == "; ".join(f"Warning R{i}: m{i}" for i in range(2, 7))
