"""`gpupool reservations`: create, list and cancel through the live API."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest


@pytest.mark.django_db(transaction=True)
def test_reservations_create_list_and_cancel(server) -> None:
    start = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    code, out, err = server.run("reservations", "create", "--pool", "training", "--team", "vision",
                                "--gpus", "4", "--model", "H100", "--start", start, "--for", "2h", "-o", "json")
    assert code == 0, err
    made = json.loads(out)
    assert (made["gpus"], made["state"], made["team"]) == (4, "active", "vision")
    code, out, _ = server.run("reservations")
    header, *rows = out.strip().splitlines()
    assert header.split()[:5] == ["ID", "STATE", "POOL", "TEAM", "GPUS"]
    assert rows[0].split()[:5] == [str(made["id"]), "active", "training", "vision", "4"]
    code, out, _ = server.run("reservations", "cancel", str(made["id"]))
    assert code == 0 and out.startswith(f"reservation {made['id']} cancelled: 4 GPUs of H100 in training")
    code, _, err = server.run("reservations", "create", "--pool", "training", "--team", "vision", "--gpus", "99",
                              "--for", "1h")
    assert code == 1 and "insufficient_capacity" in err
    code, _, err = server.run("reservations", "create", "--pool", "training")
    assert code == 2 and "create needs --team, --gpus" in err
