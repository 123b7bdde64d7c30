"""A `gpupool run` whose lease is preempted exits 75 with the reason on stderr, after passing on
what its workload wrote during the preemption's grace (its SIGTERM handler's checkpoint line):
the output is read while the ended lease's workload is being stopped."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from allocation.models import Lease
from allocation.workloads.binding import lease_unbind
from tests.cli.workloads.conftest import Binder, Gpupool
from tests.support.workload_fleets import config, ssh_lab

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sshd]
CHECKPOINTS = 'trap "echo checkpoint saved; exit 0" TERM; echo up; while :; do sleep 0.1; done'


def test_a_preempted_run_shows_what_its_grace_wrote_then_exits_75(
        lab: Gpupool, binder: Binder, apply_yaml: Any, ssh_server: Any, fake_host: Any, tmp_path: Any,
        make_user: Any, api: Any) -> None:
    lab_config = json.loads(config(ssh_lab(ssh_server, fake_host, tmp_path / "state")))
    lab_config["priority_classes"] = [{"name": "default", "value": 0, "preemptible": True, "grace_s": 2},
                                      {"name": "high", "value": 100}]
    apply_yaml(json.dumps(lab_config))
    proc, out, err = lab.start("run", "--pool", "vms", "--gpus", "1", "--", "sh", "-c", CHECKPOINTS)
    out.wait_for("up")
    carol = api(make_user("carol", teams=("nlp",)))
    for _ in range(2):  # the pool's other GPU, then alice's: only hers is preemptible
        urgent = carol.post("/api/v1/leases/", {"pool": "vms", "gpus": 1, "priority_class": "high"}, format="json")
        assert urgent.status_code == 201, urgent.content
    preempted = Lease.objects.get(user__username="alice")
    # The binder's passes preempt alice's lease; its workload is stopped as the stop task would.
    threading.Thread(target=lambda: _unbind_once_preempted(preempted.pk), daemon=True).start()
    assert proc.wait(timeout=90) == 75, err.text
    # (the shell may say its `sleep` was Terminated in between: the log as written)
    assert out.text.startswith("up\n") and out.text.endswith("checkpoint saved\n"), err.text
    assert "lease preempted: " in err.text and "(exit 75)" in err.text


def _unbind_once_preempted(lease_id: Any) -> None:
    from django.db import connection

    from stacktools.ready import wait_for

    try:
        wait_for(lambda: Lease.objects.get(pk=lease_id).state == "preempted", timeout=60, what="the preemption")
        lease_unbind(lease_id)
    finally:
        connection.close()
