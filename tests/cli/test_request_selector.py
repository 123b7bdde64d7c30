"""`gpupool request --source/--host/--label`: the lease's selector, sent as the API takes it."""

from __future__ import annotations

import json

from inventory.models import Host


def test_source_host_and_label_flags_become_the_leases_selector(server) -> None:
    host = Host.objects.filter(source__name="demo").order_by("name")[0]
    Host.objects.filter(pk=host.pk).update(labels={"zone": "a", "rack": "r1"})
    code, out, err = server.run("request", "--pool", "training", "--gpus", "1", "--source", "demo",
                                "--host", host.name, "--label", "zone=a", "--label", "rack=r1", "-o", "json")
    assert code == 0, err
    lease = json.loads(out)
    assert lease["selector"] == {"source": "demo", "host": host.name, "labels": {"zone": "a", "rack": "r1"}}


def test_a_selector_no_host_matches_is_refused_with_the_reason(server) -> None:
    code, out, err = server.run("request", "--pool", "training", "--gpus", "1", "--source", "demo-a100")
    assert code == 1 and out == ""
    assert "no host of pool training matching source=demo-a100" in err and "unsatisfiable" in err


def test_a_label_without_a_value_is_a_usage_error(server) -> None:
    code, _, err = server.run("request", "--pool", "training", "--gpus", "1", "--label", "zone")
    assert code == 2 and "--label takes KEY=VALUE" in err
