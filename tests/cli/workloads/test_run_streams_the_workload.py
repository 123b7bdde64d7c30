"""`gpupool run -- sh -c 'echo hi; exit 3'` as a process of its own against a real server: it
prints `hi` as the workload writes it and exits 3, on both binding kinds (a process over the test
sshd; a pod the Kubernetes test server runs), and Ctrl-C or SIGTERM while the output streams
releases the lease and says so."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from allocation.models import AuditEvent, Lease
from tests.cli.workloads.conftest import Binder, Gpupool
from tests.support.workload_fleets import gated

pytestmark = pytest.mark.django_db(transaction=True)
HI_EXIT_3 = ["sh", "-c", "echo hi; exit 3"]


@pytest.mark.sshd
def test_run_prints_a_process_output_and_exits_with_its_code(lab: Gpupool, binder: Binder) -> None:
    code, out, err = lab.run("run", "--pool", "vms", "--gpus", "1", "--", *HI_EXIT_3)
    assert (code, out) == (3, "hi\n"), err
    lease = Lease.objects.get()
    assert lease.binding_spec["kind"] == "process" and lease.state == "released"
    assert "lease released: process exited with code 3" in err


def test_run_prints_a_pod_output_and_exits_with_its_code(lab: Gpupool, binder: Binder) -> None:
    # A pool of Kubernetes nodes only runs pods: the CLI asks for an image, then makes the pod.
    code, _, err = lab.run("run", "--pool", "k8s", "--gpus", "1", "--", *HI_EXIT_3)
    assert code == 2 and "pool 'k8s' runs pods (Kubernetes): say which container image with --image" in err
    assert not Lease.objects.exists()

    code, out, err = lab.run("run", "--pool", "k8s", "--gpus", "1", "--image", "busybox:1.36", "--env", "A=1",
                             "--", *HI_EXIT_3)
    assert (code, out) == (3, "hi\n"), err
    lease = Lease.objects.get()
    container = lease.binding_spec["pod"]["spec"]["containers"][0]
    assert (container["image"], container["command"], container["env"]) == (
        "busybox:1.36", HI_EXIT_3, [{"name": "A", "value": "1"}])
    assert lease.state == "released" and "exited with code 3" in err


@pytest.mark.sshd
def test_each_line_comes_as_written_and_the_first_line_latency_is_measured(
        lab: Gpupool, binder: Binder, artifacts: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    started = time.monotonic()
    proc, out, err = lab.start("run", "--pool", "vms", "--gpus", "1", "--", *gated(gate))
    hi_at = out.wait_for("hi")  # while the workload waits for the gate: passed on as written
    gate.touch()
    out.wait_for("there")
    assert proc.wait(timeout=60) == 0, err.text
    assert out.text == "hi\nthere\n"
    lease_id = str(Lease.objects.get().pk)
    figures = {"workload_bound_to_first_line_ms": round((hi_at - binder.bound_at[lease_id]) * 1000),
               "command_start_to_first_line_ms": round((hi_at - started) * 1000),
               "command_start_to_exit_ms": round((time.monotonic() - started) * 1000)}
    (artifacts / "run-first-line-latency.json").write_text(json.dumps(figures, indent=2) + "\n")
    print("gpupool run, first line:", figures)


@pytest.mark.sshd
@pytest.mark.parametrize("sig, code, said", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_a_signal_while_the_output_streams_releases_the_lease_and_says_so(
        lab: Gpupool, binder: Binder, sig: int, code: int, said: str) -> None:
    proc, out, err = lab.start("run", "--pool", "vms", "--gpus", "1", "--", "sh", "-c", "echo ready; exec sleep 300")
    out.wait_for("ready")
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == code, err.text
    lease = Lease.objects.get()
    assert f"released lease {lease.pk} ({said})" in err.text
    assert lease.state == "released"
    assert lease.reason.startswith(f"released from the CLI: {said} while the workload ran"), lease.reason
    assert AuditEvent.objects.filter(lease_id=lease.pk, action="lease.released", message__contains=said).exists()


def test_machine_output_keeps_stdout_for_the_lease_and_the_workload_output_on_stderr(
        lab: Gpupool, binder: Binder, kube_api: Any) -> None:
    code, out, err = lab.run("run", "-o", "json", "--pool", "k8s", "--gpus", "1", "--image", "busybox:1.36",
                             "--", *HI_EXIT_3)
    assert code == 3, err
    lease = json.loads(out)
    assert (lease["state"], lease["exit_code"]) == ("released", 3)
    assert err.startswith("hi\n")
