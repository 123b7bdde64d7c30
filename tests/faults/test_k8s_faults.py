"""Fault (e2): a Kubernetes API that answers 500s, 429s with Retry-After, and slowly.

The API is the stateful test server over real HTTP (tests/support/kube_server.py), driven by the
official client; leases live in the real database and move through the real binding services,
as the bind task and its retries run them. Invariants: never two pods for one lease (counted by
the `gpupool.io/lease` label on the server), every failure visible in words (the lease's reason,
the source's last error, the binding's observe error), a lease whose binding cannot start ends
`failed` with its GPUs freed, and a cluster that stays away loses its leases (requeued when they
ask for it).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest

from allocation.engine import run_pass
from allocation.models import Lease
from allocation.services.reaper import leases_reap
from allocation.workloads.binding import TransientBindError, bindings_observe, lease_bind, lease_unbind
from inventory.discovery import source_discover
from inventory.models import Host, Source
from inventory.sync import hosts_mark_stale
from stacktools.ready import wait_until
from tests.faults.agent_fixtures import Figures
from tests.support.kube import derived_node
from tests.support.kube_server import KubeApiServer

pytestmark = pytest.mark.django_db

LABEL = "gpupool.io/lease"
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train"},
       "spec": {"containers": [{"name": "main", "image": "pytorch/pytorch:2.4", "command": ["python", "t.py"]}]}}
REQUEST_TIMEOUT_S = 1


@pytest.fixture
def cluster(apply_yaml: Any, kube_api: KubeApiServer, make_user: Any, api: Any) -> Any:
    kube_api.load_nodes([derived_node("gke-t4"), {**derived_node("gke-t4"), "metadata": {
        **derived_node("gke-t4")["metadata"], "name": "gke-t4-b"}}])
    config = {
        "pools": [{"name": "k8s"}], "teams": [{"name": "vision", "members": ["alice"]}],
        "priority_classes": [{"name": "default", "value": 0, "grace_s": 1}],
        "sources": [{"name": "prod", "kind": "kubernetes", "pool": "k8s", "host": kube_api.url, "interval_s": 1,
                     "namespace": "gpupool-jobs", "request_timeout": REQUEST_TIMEOUT_S}],
    }
    apply_yaml(json.dumps(config))
    return api(make_user("alice", teams=("vision",)))


def _pods_per_lease(server: KubeApiServer) -> Counter[str]:
    with server._lock:
        return Counter((p["metadata"].get("labels") or {}).get(LABEL, "") for p in server.pods.values())


def _lease(client: Any, **extra: Any) -> str:
    body = {"pool": "k8s", "gpus": 1, "binding": {"kind": "pod", "pod": POD}, **extra}
    response = client.post("/api/v1/leases/", body, format="json")
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def _bind_as_the_task_does(lease_id: str, figures: Figures, attempts: int = 6) -> str:
    """lease_bind as the bind task runs it: retried on TransientBindError, the last try final."""
    for attempt in range(attempts + 1):
        try:
            return lease_bind(lease_id, final_attempt=attempt == attempts)
        except TransientBindError:
            figures.add("task_retries")
    raise AssertionError("unreachable: the final attempt never raises")


def test_500s_429s_and_slow_answers_start_exactly_one_pod_per_lease(cluster: Any, kube_api: KubeApiServer) -> None:
    figures = Figures("k8s_api_faults")
    ids = [_lease(cluster) for _ in range(4)]
    run_pass()
    assert set(Lease.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"granted"}

    # 500s: the connector retries inside its budget; the pod is made once.
    kube_api.fail_next(2, status=500, method="POST")
    assert _bind_as_the_task_does(ids[0], figures) == "bound"

    # 429 with Retry-After: the next try waits at least that long (not the 0.5 s usual pause).
    kube_api.fail_next(1, status=429, method="POST", retry_after=2, message="too many requests")
    assert _bind_as_the_task_does(ids[1], figures) == "bound"
    posts = kube_api.requests_to("POST", "/api/v1/namespaces/gpupool-jobs/pods")[-2:]
    waited = posts[1].at - posts[0].at
    figures["retry_after_asked_s"], figures["retry_after_waited_s"] = 2, round(waited, 2)
    assert 2.0 <= waited < 3.0

    # A create slower than the client's timeout: the server makes the pod after the client gave
    # up; the retry meets it (409) and adopts it instead of making a second.
    kube_api.delay_next(1, REQUEST_TIMEOUT_S + 1.5, method="POST")
    assert _bind_as_the_task_does(ids[2], figures) == "bound"

    # An API that keeps failing: the lease says why while the task retries, then ends failed.
    kube_api.fail_next(10_000, status=500, method="POST", message="etcdserver: request timed out")
    started = time.monotonic()
    with pytest.raises(TransientBindError):
        lease_bind(ids[3])
    one_call_s = time.monotonic() - started
    figures["one_bind_call_s"] = round(one_call_s, 2)
    assert one_call_s < 16  # the connector's 15 s budget bounds a call: no worker hangs on it
    assert "binding retrying after error" in Lease.objects.get(pk=ids[3]).reason
    assert "etcdserver" in Lease.objects.get(pk=ids[3]).reason
    assert lease_bind(ids[3], final_attempt=True) == "failed"
    failed = Lease.objects.get(pk=ids[3])
    assert failed.state == "failed" and "etcdserver" in failed.reason
    assert not failed.gpu_links.filter(active=True).exists()
    kube_api.faults.clear()

    pods = _pods_per_lease(kube_api)
    figures["pods_per_bound_lease"] = sorted(pods[i] for i in ids[:3])
    assert [pods[i] for i in ids] == [1, 1, 1, 0]
    assert set(Lease.objects.filter(pk__in=ids[:3]).values_list("state", flat=True)) == {"bound"}

    # Slow reads while watching: a pod read slower than the timeout, then 503s, for every try of
    # one observe; it is recorded on the binding, the lease stays bound, the others are read.
    kube_api.delay_next(1, REQUEST_TIMEOUT_S + 0.5, method="GET", path_prefix="/api/v1/namespaces/")
    kube_api.fail_next(3, status=503, method="GET", path_prefix="/api/v1/namespaces/")
    started = time.monotonic()
    counts = bindings_observe()
    figures["observe_pass_s_slow_api"] = round(time.monotonic() - started, 2)
    kube_api.faults.clear()
    assert counts == {"error": 1, "starting": 2}, counts
    assert set(Lease.objects.filter(pk__in=ids[:3]).values_list("state", flat=True)) == {"bound"}
    errors = [lease.binding_status.get("observe_error", "") for lease in Lease.objects.filter(pk__in=ids[:3])]
    assert sum("HTTP 503" in e for e in errors) == 1, errors
    assert bindings_observe().get("starting") == 3  # the API is back: Pending pods, nothing lost

    retries = figures.values.get("task_retries", 0)
    figures["faults_injected"] = {"http_500": 2 + 4 * (retries + 1), "http_429": 1, "slow_create": 1,
                                  "slow_read": 1, "http_503_reads": 3}
    figures["duplicate_pods"] = sum(max(0, n - 1) for n in pods.values())
    assert figures["duplicate_pods"] == 0
    figures.write()


def test_a_cluster_that_stays_down_loses_its_leases_and_requeues_those_that_ask(
        cluster: Any, kube_api: KubeApiServer, settings: Any) -> None:
    settings.GPUPOOL = {**settings.GPUPOOL, "LOST_GRACE_S": 0, "OFFLINE_AFTER_INTERVALS": 1}
    figures = Figures("k8s_api_down")
    keep, requeue = _lease(cluster), _lease(cluster, requeue_on_loss=True)
    run_pass()
    assert lease_bind(keep) == "bound" and lease_bind(requeue) == "bound"

    kube_api.fail_next(10_000, status=500, message="etcdserver: leader changed")
    down = time.monotonic()
    source = Source.objects.get(name="prod")
    source_discover(source=source)
    source.refresh_from_db()
    assert "HTTP 500" in source.last_error and "leader changed" in source.last_error
    # Hosts age into offline once not heard from for the source's interval (1 s here; the
    # discovery's own retries took longer than that).
    assert wait_until(hosts_mark_stale, timeout=3) == 2
    assert all("not heard from since" in h.error for h in Host.objects.all())
    reaped = leases_reap()
    figures["lost"], figures["requeued"] = reaped["lost"], reaped["requeued"]
    assert (reaped["lost"], reaped["requeued"]) == (2, 1)
    assert Lease.objects.get(pk=keep).state == "lost"
    requeued = Lease.objects.get(pk=requeue)
    assert requeued.state == "pending" and "requeued" in requeued.reason

    kube_api.faults.clear()
    source_discover(source=source)
    recovered = time.monotonic() - down
    run_pass()
    assert Lease.objects.get(pk=requeue).state == "granted"
    assert lease_bind(requeue) == "bound"
    figures["recovery_s"] = round(recovered, 2)
    pods = _pods_per_lease(kube_api)
    with kube_api._lock:
        nodes = {(p["metadata"].get("labels") or {}).get(LABEL): p["spec"].get("nodeName")
                 for p in kube_api.pods.values()}
    # The lost lease's pod may still run: its GPUs stay held until the unbind task (asked for
    # when it was lost, retried while the cluster was away) has deleted it.
    lost = Lease.objects.get(pk=keep)
    assert lost.ending_since is not None and lost.gpu_links.filter(active=True).exists()
    assert lease_unbind(keep) == "unbound"
    pods = _pods_per_lease(kube_api)
    assert pods[keep] == 0, "the lost lease's pod is still on the cluster"
    assert not Lease.objects.get(pk=keep).gpu_links.filter(active=True).exists()
    assert nodes[requeue] == Lease.objects.values_list("host__name", flat=True).get(pk=requeue)
    # The requeued lease's first pod is stopped by its stranded copy, which holds the GPUs it
    # ran on meanwhile; the lease's new pod is named apart (generation 1), never adopted.
    stranded = Lease.objects.get(binding_status__binding_of__lease=requeue)
    assert stranded.ending_since is not None and stranded.gpu_links.filter(active=True).exists()
    assert pods[requeue] == 2
    assert lease_unbind(stranded.pk) == "unbound"
    assert not Lease.objects.get(pk=stranded.pk).gpu_links.filter(active=True).exists()
    pods = _pods_per_lease(kube_api)
    assert kube_api.pod("gpupool-jobs", f"gpupool-{requeue}-1") is not None
    figures["pods_of_requeued_lease"] = pods[requeue]
    assert pods[requeue] == 1
    figures["faults_injected"] = {"http_500_all_requests": "until recovery"}
    figures["duplicate_pods"] = sum(max(0, n - 1) for n in pods.values())
    assert figures["duplicate_pods"] == 0
    figures.write()
