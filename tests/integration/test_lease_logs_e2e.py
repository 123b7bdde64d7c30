"""A workload's log through the production web server (gunicorn + uvicorn on pool.asgi, whose
event loop streams it), from a process on the test sshd and a pod the Kubernetes test server runs:
lines arrive as they are written, the answer ends with the workload, and the lease then shows the
exit code; a client that leaves ends the reader on the host and frees its place."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from allocation.models import Lease
from stacktools.ready import wait_for
from tests.support.processes import web_server
from tests.support.tokens import api_key
from tests.support.workload_fleets import (
    HI_THERE,
    bound_lease,
    config,
    gated,
    k8s_lab,
    pod_binding,
    process_binding,
    ssh_lab,
    start_pod,
)

pytestmark = [pytest.mark.slow]
PER_USER = 2  # the web server's GPUPOOL_LOG_STREAMS_PER_USER


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: Any) -> Iterator[str]:
    with django_db_blocker.unblock(), web_server(tmp_path_factory.mktemp("web") / "web.log", GPUPOOL_AUTOSCHEDULE="0",
                                                 GPUPOOL_LOG_STREAMS_PER_USER=str(PER_USER)) as url:
        yield url + "/api/v1/"


@pytest.fixture
def lab(web: str, transactional_db: Any, apply_yaml: Any, ssh_server: Any, fake_host: Any, kube_api: Any,
        tmp_path: Path, make_user: Any, api: Any) -> dict[str, Any]:
    apply_yaml(config(ssh_lab(ssh_server, fake_host, tmp_path / "state"), k8s_lab(kube_api)))
    alice, carol = make_user("alice", teams=("vision",)), make_user("carol", teams=("nlp",))
    return {"url": web, "client": api(alice), "alice": _session(api_key(alice)), "carol": _session(api_key(carol))}


def _session(token: str) -> requests.Session:
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    return session


def _follow(session: requests.Session, url: str) -> bytes:
    with session.get(url, stream=True, timeout=30) as response:
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
        return b"".join(response.iter_content(chunk_size=None))


def _ends_with_exit_code_3(lab: dict[str, Any], lease_id: str) -> None:
    lease = lab["alice"].get(f"{lab['url']}leases/{lease_id}/").json()
    assert (lease["state"], lease["exit_code"]) == ("released", 3), lease
    assert lab["alice"].get(f"{lab['url']}leases/{lease_id}/logs/?tail=1").content == b"there\n"


@pytest.mark.sshd
def test_a_process_log_streams_as_written_and_the_lease_then_shows_exit_code_3(lab: dict[str, Any]) -> None:
    lease_id = bound_lease(lab["client"], "vms", process_binding(HI_THERE))
    assert _follow(lab["alice"], f"{lab['url']}leases/{lease_id}/logs/?follow=true") == b"hi\nthere\n"
    _ends_with_exit_code_3(lab, lease_id)  # recorded as the log ended, not by the observe sweep

    url = f"{lab['url']}leases/{lease_id}/logs/"
    other = lab["carol"].get(url)
    assert (other.status_code, other.json()["code"]) == (404, "not_found")
    assert requests.get(url, timeout=10).status_code == 401
    for query, code in (("tail=-1", "invalid"), ("tail=many", "invalid"), ("lines=1", "unknown_parameter")):
        bad = lab["alice"].get(f"{url}?{query}")
        assert (bad.status_code, bad.json()["code"]) == (400, code), query
    assert lab["alice"].post(url).status_code == 405


def test_a_pod_log_streams_as_written_and_the_lease_then_shows_exit_code_3(lab: dict[str, Any], kube_api: Any) -> None:
    lease_id = bound_lease(lab["client"], "k8s", pod_binding(HI_THERE))
    # The follow opens while the pod is Pending, and waits for it to start.
    handle = Lease.objects.get(pk=lease_id).binding_status["handle"]
    threading.Timer(1.0, kube_api.run_pod, (handle["namespace"], handle["name"])).start()
    assert _follow(lab["alice"], f"{lab['url']}leases/{lease_id}/logs/?follow=true") == b"hi\nthere\n"
    _ends_with_exit_code_3(lab, lease_id)
    assert lab["carol"].get(f"{lab['url']}leases/{lease_id}/logs/").status_code == 404


@pytest.mark.parametrize("kind", [pytest.param("process", marks=pytest.mark.sshd), "pod"])
def test_a_followed_log_passes_each_line_on_as_it_is_written(lab: dict[str, Any], kube_api: Any, kind: str,
                                                              tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    binding = process_binding(gated(gate)) if kind == "process" else pod_binding(gated(gate))
    lease_id = bound_lease(lab["client"], "vms" if kind == "process" else "k8s", binding)
    if kind == "pod":
        start_pod(kube_api, lease_id)
    with lab["alice"].get(f"{lab['url']}leases/{lease_id}/logs/?follow=true", stream=True, timeout=30) as response:
        chunks = response.iter_content(chunk_size=None)
        assert next(chunks) == b"hi\n"  # while the workload waits for the gate
        gate.touch()
        assert b"".join(chunks) == b"there\n"
    lease = lab["alice"].get(f"{lab['url']}leases/{lease_id}/").json()
    assert (lease["state"], lease["exit_code"]) == ("released", 0)


def _readers_on_host(log: Path) -> list[int]:
    """The follow loops of the log script reading `log`: `/bin/sh -s` with it open as fd 3 (its
    children, `sleep` or `cat`, inherit the descriptor: they are left out, and so is a loop's own
    fork in the instant before it becomes one of them, still `/bin/sh -s` by its command line)."""
    found: dict[int, int] = {}  # pid -> parent pid
    for fd in Path("/proc").glob("[0-9]*/fd/3"):
        try:
            if fd.readlink() == log and (fd.parents[1] / "cmdline").read_bytes() == b"/bin/sh\0-s\0":
                stat = (fd.parents[1] / "stat").read_text()
                found[int(fd.parts[2])] = int(stat.rpartition(")")[2].split()[1])
        except OSError:
            continue
    return sorted(pid for pid, parent in found.items() if parent not in found)


@pytest.mark.sshd
def test_a_client_that_leaves_ends_the_reader_on_the_host_and_frees_its_place(lab: dict[str, Any]) -> None:
    lease_id = bound_lease(lab["client"], "vms", process_binding(["sh", "-c", "echo ready; exec sleep 300"]))
    log = Path(Lease.objects.get(pk=lease_id).binding_status["handle"]["log"])
    url = f"{lab['url']}leases/{lease_id}/logs/?follow=true"
    open_streams = []
    for _ in range(PER_USER):
        response = lab["alice"].get(url, stream=True, timeout=30)
        chunks = response.iter_content(chunk_size=None)
        assert next(chunks) == b"ready\n"
        open_streams.append((response, chunks))  # a reader left to the garbage collector closes its answer
    assert len(wait_for(lambda: len(readers := _readers_on_host(log)) == PER_USER and readers)) == PER_USER
    over = lab["alice"].get(url, timeout=30)
    assert (over.status_code, over.json()["code"]) == (429, "too_many_log_streams") and over.headers["Retry-After"]
    # Open streams hold no request thread: the API answers at once meanwhile.
    started = time.monotonic()
    assert lab["alice"].get(f"{lab['url']}leases/{lease_id}/").status_code == 200
    assert time.monotonic() - started < 2
    for response, _ in open_streams:
        response.close()
    wait_for(lambda: not _readers_on_host(log), timeout=5, what="the log readers on the host to end")
    again = lab["alice"].get(url, stream=True, timeout=30)
    assert again.status_code == 200, "the places of the streams that left are free again"
    again.close()
    lab["alice"].post(f"{lab['url']}leases/{lease_id}/release/")


@pytest.mark.sshd
def test_lines_reach_the_client_within_a_fraction_of_a_second_of_being_written(
        lab: dict[str, Any], artifacts: Path) -> None:
    """The figure: a line written on the host (its own clock, this machine's) to the client
    receiving it through the web server, over 40 lines written 0.25 s apart."""
    script = "for i in $(seq 40); do date +%s.%N; sleep 0.25; done"
    lease_id = bound_lease(lab["client"], "vms", process_binding(["sh", "-c", script]))
    delays = []
    with lab["alice"].get(f"{lab['url']}leases/{lease_id}/logs/?follow=true&tail=0", stream=True, timeout=60) as r:
        for line in r.iter_lines():
            delays.append(time.time() - float(line))
    assert len(delays) >= 35
    figures = {"lines": len(delays), "p50_ms": round(statistics.median(delays) * 1000, 1),
               "p95_ms": round(statistics.quantiles(delays, n=20)[-1] * 1000, 1),
               "max_ms": round(max(delays) * 1000, 1)}
    (artifacts / "workload-log-latency.json").write_text(json.dumps(figures, indent=2) + "\n")
    print("log line latency (host write → client):", figures)
    assert figures["p50_ms"] < 500
