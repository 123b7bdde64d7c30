"""`-o json` prints machine-readable JSON (the API's own objects), before or after the command."""

from __future__ import annotations

import json

import pytest


@pytest.mark.django_db(transaction=True)
def test_json_output_is_the_api_objects_for_pools_gpus_and_requests(server) -> None:
    code, out, _ = server.run("-o", "json", "pools")
    assert code == 0 and {p["name"] for p in json.loads(out)} == {"training", "inference"}
    _, out, _ = server.run("gpus", "--pool", "inference", "-o", "json")
    assert len(json.loads(out)) == 8 and json.loads(out)[0]["uuid"].startswith("GPU-")
    code, out, err = server.run("request", "--gpus", "1", "--pool", "inference", "--spread", "-o", "json")
    lease = json.loads(out)
    assert code == 0 and lease["state"] == "pending" and lease["same_host"] is False and err == ""
    _, out, _ = server.run("show", lease["id"], "-o", "json")
    shown = json.loads(out)
    assert shown["id"] == lease["id"] and [e["action"] for e in shown["events"]] == ["lease.created"]
