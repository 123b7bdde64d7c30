"""`gpupool request --topology LEVEL[:MODE]`: the lease's topology, sent as the API takes it;
a level the server does not know comes back as its error."""

from __future__ import annotations

import json


def test_topology_flag_becomes_the_leases_topology(server) -> None:
    code, out, err = server.run("request", "--pool", "training", "--gpus", "2", "--topology", "nvlink:required",
                                "-o", "json")
    assert code == 0, err
    assert json.loads(out)["topology"] == {"within": "nvlink", "mode": "required"}
    code, out, err = server.run("request", "--pool", "training", "--gpus", "2", "--topology", "host", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["topology"] == {"within": "host", "mode": "preferred"}


def test_an_unknown_level_is_the_servers_error_and_a_bad_mode_a_usage_error(server) -> None:
    code, out, err = server.run("request", "--pool", "training", "--gpus", "2", "--topology", "rack")
    assert code == 1 and out == ""
    assert "unknown_topology_level" in err
    code, _, err = server.run("request", "--pool", "training", "--gpus", "2", "--topology", "rack:maybe")
    assert code == 2 and "--topology takes LEVEL[:required|preferred]" in err
