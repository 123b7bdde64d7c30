"""`gpupool run -- CMD` requests a lease with a process binding, says where it runs, passes its
output on, follows it to the end and exits with the workload's exit code. Here on the simulated
fleet, whose workloads end after `duration_s` (the worker's 1 s) and write a made-up log; real
workloads (the test sshd, the Kubernetes test server): tests/cli/workloads/."""

from __future__ import annotations

import pytest

from allocation.models import Lease


@pytest.mark.django_db(transaction=True)
def test_run_binds_the_command_follows_it_and_exits_with_its_code(server, worker) -> None:
    code, out, err = server.run("run", "--gpus", "2", "--pool", "training", "--env", "SEED=7", "--poll", "0.1",
                                "--", "python", "train.py", "--epochs", "1")
    assert code == 0, err
    # stdout is the workload's output only (progress goes to stderr): here the simulated log
    lines = out.splitlines()
    assert lines[0].startswith("[simulated] process of lease") and lines[0].endswith("python train.py --epochs 1")
    assert lines[-1] == "[simulated] exited with code 0"
    assert "running on demo-node-" in err
    assert "lease released: simulated workload finished" in err

    lease = Lease.objects.get()
    assert lease.binding_spec["command"] == ["python", "train.py", "--epochs", "1"]
    assert lease.binding_spec["env"] == {"SEED": "7"} and lease.binding_spec["kind"] == "process"
    assert Lease.objects.get(pk=str(lease.pk)).state == "released"


@pytest.mark.django_db(transaction=True)
def test_run_without_a_command_is_a_usage_error(server) -> None:
    code, _, err = server.run("run", "--gpus", "1", "--pool", "training")
    assert code == 2 and err.startswith("error: say what to run after --")


@pytest.mark.django_db(transaction=True)
def test_run_with_no_logs_follows_the_lease_only(server, worker) -> None:
    code, out, err = server.run("run", "--gpus", "1", "--pool", "training", "--no-logs", "--poll", "0.1", "--",
                                "python", "train.py")
    assert (code, out) == (0, ""), err
    assert "lease released: simulated workload finished" in err
