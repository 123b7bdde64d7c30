"""`gpupool request --count N`: N leases through the batch endpoint, each under its own key."""

from __future__ import annotations

import json

from allocation.models import Lease


def test_count_makes_n_leases_in_one_batch_call_each_under_its_own_key(server) -> None:
    code, out, err = server.run("request", "--pool", "training", "--gpus", "1", "--count", "5", "-o", "json")
    assert code == 0, err
    leases = json.loads(out)
    assert len(leases) == 5 and {lease["state"] for lease in leases} == {"pending"}
    keys = set(Lease.objects.filter(pk__in=[lease["id"] for lease in leases]).values_list("idempotency_key", flat=True))
    assert len(keys) == 5 and all(key.startswith("gpupool-cli-") for key in keys)
    # Human output: one row per lease.
    code, out, err = server.run("request", "--pool", "training", "--gpus", "1", "--count", "2")
    assert code == 0, err
    newest = [str(i) for i in Lease.objects.order_by("-created_at").values_list("id", flat=True)[:2]]
    assert all(lease_id[:8] in out for lease_id in newest)


def test_items_the_server_refuses_make_the_command_fail_naming_how_many(server) -> None:
    code, out, err = server.run("request", "--pool", "training", "--gpus", "999", "--count", "3")
    assert code != 0 and out == ""
    assert "3 of 3 lease requests failed" in err
    assert server.run("request", "--pool", "training", "--gpus", "1", "--count", "2", "--wait")[0] == 2
