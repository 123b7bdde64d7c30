"""`gpupool logs ID [-f] [--tail N]` as a process of its own: a lease's workload output by id
prefix, followed to its end, the last lines only, and each refusal of the log endpoint in words
with its exit code (no workload, not started yet, gone, not found)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from allocation.engine import run_pass
from allocation.models import Lease
from allocation.workloads.binding import lease_bind
from tests.cli.workloads.conftest import Gpupool
from tests.support.workload_fleets import HI_THERE, bound_lease, process_binding

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sshd]


@pytest.fixture
def alice(lab: Gpupool, api: Any) -> Any:
    from django.contrib.auth.models import User

    return api(User.objects.get(username="alice"))


def test_logs_follows_to_the_end_then_reads_whole_or_the_last_lines(lab: Gpupool, alice: Any) -> None:
    lease_id = bound_lease(alice, "vms", process_binding(HI_THERE))
    assert lab.run("logs", lease_id[:8], "-f") == (0, "hi\nthere\n", "")
    assert Lease.objects.get(pk=lease_id).exit_code == 3  # the follow ended with the workload
    assert lab.run("logs", lease_id[:8])[:2] == (0, "hi\nthere\n")
    assert lab.run("logs", lease_id, "--tail", "1")[:2] == (0, "there\n")


def test_logs_of_a_lease_without_a_workload_or_not_yet_started_say_so(lab: Gpupool, alice: Any) -> None:
    bare = alice.post("/api/v1/leases/", {"pool": "vms", "gpus": 1}, format="json").json()["id"]
    code, out, err = lab.run("logs", bare[:8])
    assert (code, out) == (1, "") and "runs no workload" in err and "(no_workload)" in err
    waiting = alice.post("/api/v1/leases/", {"pool": "vms", "gpus": 1, "binding": process_binding(["true"])},
                         format="json").json()["id"]
    code, _, err = lab.run("logs", waiting[:8])
    assert code == 1 and "-f waits for it (workload_not_started)" in err, err
    code, _, err = lab.run("logs", "0000dead")
    assert code == 3 and "no lease of yours starts with '0000dead'" in err


def test_logs_f_waits_for_the_workload_to_start(lab: Gpupool, alice: Any) -> None:
    lease_id = alice.post("/api/v1/leases/", {"pool": "vms", "gpus": 1, "binding": process_binding(HI_THERE)},
                          format="json").json()["id"]
    proc, out, err = lab.start("logs", "-f", lease_id[:8])
    err.wait_for("waiting for its workload to start")
    run_pass()  # granted, then bound: as the scheduler and the binding task would
    assert lease_bind(lease_id) == "bound"
    assert proc.wait(timeout=60) == 0, err.text
    assert out.text == "hi\nthere\n"


def test_a_log_removed_from_the_host_is_gone_exit_3(lab: Gpupool, alice: Any) -> None:
    lease_id = bound_lease(alice, "vms", process_binding(["sh", "-c", "echo one"]))
    (Path(Lease.objects.get(pk=lease_id).binding_status["handle"]["dir"]) / "output.log").unlink()
    code, _, err = lab.run("logs", lease_id[:8])
    assert code == 3 and f"the log of lease {lease_id[:8]} is gone" in err and "(logs_gone)" in err
