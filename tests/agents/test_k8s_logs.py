"""A pod workload's log through the API server's `log` subresource (agents.k8s_logs), against the
Kubernetes test server: its first container's log, streamed as it comes, a follow that waits for a
Pending pod and ends when the pod terminates, a close that interrupts a waiting read, a pod gone."""

from __future__ import annotations

import threading
import time

import pytest

from agents.base import AgentError
from tests.support.kube import connector_for, make_pod
from tests.support.kube_server import KubeApiServer

NS = "gpupool-jobs"
HANDLE = {"namespace": NS, "name": "job", "node": "n1", "uid": ""}


def _pod(server: KubeApiServer, *, phase: str = "Running", containers: tuple[str, ...] = ("main",)) -> None:
    pod = make_pod("job", "n1", namespace=NS, phase=phase)
    pod["spec"]["containers"] = [{"name": name, "image": "busybox"} for name in containers]
    server.add_pod(pod)


def test_the_log_is_the_first_containers_with_its_last_lines(kube_api: KubeApiServer) -> None:
    _pod(kube_api, containers=("main", "sidecar"))
    kube_api.append_pod_log(NS, "job", "one\ntwo\nthree\n")
    connector = connector_for(kube_api)
    assert b"".join(connector.logs(HANDLE, tail=None, follow=False)) == b"one\ntwo\nthree\n"
    assert b"".join(connector.logs(HANDLE, tail=2, follow=False)) == b"two\nthree\n"
    asked = kube_api.requests_to("GET", f"/api/v1/namespaces/{NS}/pods/job/log")
    assert [r.query.get("container") for r in asked] == ["main", "main"]
    assert asked[-1].query["tailLines"] == "2" and asked[-1].query["follow"] == "false"


def test_a_follow_of_a_pending_pod_waits_for_it_to_start_then_ends_when_it_terminates(
        kube_api: KubeApiServer) -> None:
    _pod(kube_api, phase="Pending")
    connector = connector_for(kube_api)
    assert b"".join(connector.logs(HANDLE, tail=None, follow=False)) == b""  # nothing written yet
    stream = connector.logs(HANDLE, tail=None, follow=True)

    def start() -> None:
        time.sleep(0.6)
        kube_api.set_pod_phase(NS, "job", "Running")
        kube_api.append_pod_log(NS, "job", "started\n")

    threading.Thread(target=start, daemon=True).start()
    assert next(stream) == b"started\n"  # passed on as it came, before the pod ends
    kube_api.append_pod_log(NS, "job", "done\n")
    kube_api.set_pod_phase(NS, "job", "Failed", exit_code=2)
    assert b"".join(stream) == b"done\n"
    assert stream.workload_ended
    assert connector.observe(HANDLE).exit_code == 2


def test_closing_a_follow_interrupts_a_waiting_read(kube_api: KubeApiServer) -> None:
    _pod(kube_api)
    kube_api.append_pod_log(NS, "job", "up\n")
    stream = connector_for(kube_api).logs(HANDLE, tail=None, follow=True)
    assert next(stream) == b"up\n"
    threading.Timer(0.3, stream.close).start()
    started = time.monotonic()
    assert list(stream) == [] and not stream.workload_ended
    assert time.monotonic() - started < 3


def test_a_pod_that_is_gone_has_no_log_any_more(kube_api: KubeApiServer) -> None:
    with pytest.raises(AgentError, match="no longer exists") as error:
        connector_for(kube_api).logs(HANDLE, tail=None, follow=True)
    assert error.value.permanent


def test_an_api_server_that_cannot_be_reached_is_a_transient_error(kube_api: KubeApiServer) -> None:
    _pod(kube_api)
    connector = connector_for(kube_api)
    kube_api.fail_next(10, status=503, path_prefix=f"/api/v1/namespaces/{NS}/pods/job")
    connector.retry_budget_s = 0.5
    with pytest.raises(AgentError) as error:
        connector.logs(HANDLE, tail=None, follow=False)
    assert not error.value.permanent


