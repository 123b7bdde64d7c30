"""`gpupool request --wait` shows the queue while pending and returns once the lease is granted;
`ls`, `show` (with the audit trail), `renew` and `release` follow it through."""

from __future__ import annotations

import json

import pytest

from allocation.models import Lease


@pytest.mark.django_db(transaction=True)
def test_request_wait_returns_the_granted_lease_and_release_ends_it(server, worker) -> None:
    code, out, err = server.run("request", "--gpus", "2", "--pool", "training", "--model", "H100",
                                "--ttl", "30m", "--wait", "--poll", "0.1")
    assert code == 0, err
    assert "requested lease" in err and "pending" in err  # plain status lines on a pipe
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line and not line.startswith(" "))
    lease_id = fields["id"].strip()
    assert fields["state"].strip() == "granted" and fields["gpus"].strip() == "2/2"
    assert Lease.objects.get(pk=lease_id).ttl_seconds == 1800

    _, out, _ = server.run("ls")
    assert lease_id[:8] in out and "granted" in out
    code, out, _ = server.run("show", lease_id[:8])
    assert code == 0 and "audit trail" in out and "lease.granted" in out and "system:scheduler" in out
    code, out, _ = server.run("renew", lease_id, "--ttl", "1h")
    assert code == 0 and "renewed" in out and Lease.objects.get(pk=lease_id).ttl_seconds == 3600
    code, out, _ = server.run("release", lease_id)
    assert code == 0 and "released" in out
    assert Lease.objects.get(pk=lease_id).state == "released"
    _, out, _ = server.run("ls")
    assert lease_id[:8] not in out
    _, out, _ = server.run("ls", "--all", "-o", "json")
    assert [x["state"] for x in json.loads(out) if x["id"] == lease_id] == ["released"]


@pytest.mark.django_db(transaction=True)
def test_request_without_a_pool_names_the_pools_when_there_are_several(server) -> None:
    code, out, err = server.run("request", "--gpus", "1")
    assert code == 2 and out == ""
    assert err.strip() == "error: several pools (inference, training): say which with --pool (pool_required)"
