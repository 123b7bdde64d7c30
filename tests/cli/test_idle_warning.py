"""An idle-reclaim warning shows in `ls`, `show` and the status line; `renew --keep` asks for the
exemption, refused to a member (exit 3, keep_requires_admin)."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from allocation.engine import run_pass
from allocation.models import Lease
from gpupool_cli.waiting import status_line

WARNING = "idle: all 2 GPUs below 5% utilisation since 2030-01-01 00:00:00 UTC (for 1800 s or more)"


def _warned_lease(server) -> str:
    code, out, _ = server.run("request", "--gpus", "2", "--pool", "training", "-o", "json")
    assert code == 0
    lease_id = json.loads(out)["id"]
    run_pass()
    Lease.objects.filter(pk=lease_id).update(warning=WARNING, reason=WARNING, warned_at=timezone.now())
    return lease_id


@pytest.mark.django_db(transaction=True)
def test_ls_and_show_print_the_warning(server) -> None:
    lease_id = _warned_lease(server)
    code, out, _ = server.run("ls")
    row = next(line for line in out.splitlines() if line.startswith(lease_id[:8]))
    assert code == 0 and "WARNING idle: all 2 GPUs below 5%" in row
    code, out, _ = server.run("show", lease_id)
    assert code == 0 and f"\nWARNING:         {WARNING}\n" in out
    _, out, _ = server.run("ls", "-o", "json")
    assert json.loads(out)[0]["warning"] == WARNING


@pytest.mark.django_db(transaction=True)
def test_renew_keep_by_a_member_is_refused_with_its_code(server) -> None:
    lease_id = _warned_lease(server)
    code, _, err = server.run("renew", lease_id, "--keep")
    assert code == 3 and err.startswith("error: only a pool admin may exempt") and "(keep_requires_admin)" in err
    assert Lease.objects.get(pk=lease_id).idle_exempt is False
    assert server.run("renew", lease_id)[0] == 0


def test_the_status_line_of_a_warned_lease_carries_the_warning() -> None:
    lease = {"state": "granted", "gpus": ["a", "b"], "host": "h1", "warning": WARNING}
    assert status_line(lease) == f"granted: 2 GPU(s) on h1 (WARNING {WARNING})"
    assert status_line({**lease, "warning": ""}) == "granted: 2 GPU(s) on h1"
