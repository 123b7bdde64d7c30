"""A host backing off after failed discovery probes says so: its failures in a row and when it is
probed next, on its dashboard card and in the hosts API (tests/inventory/test_host_backoff.py
makes a real one back off)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pytest

from inventory.models import Host

pytestmark = pytest.mark.django_db


def test_the_fleet_card_says_how_often_it_failed_and_when_it_is_probed_next(seeded: Any, client_for: Any) -> None:
    html = client_for(seeded.users["alice"]).get("/fleet/?q=lab-a100").content.decode()
    card = html[html.index('data-host="lab-a100-1"'):]
    line = re.search(r"<p class=\"host-backoff\" data-backoff>([^<]*)</p>", card)
    assert line is not None
    assert re.fullmatch(r"Discovery failed 3 times in a row; next probe in (1|2) min \d\d s\.", line.group(1))
    healthy = html[html.index('data-host="lab-a100-0"'):html.index('data-host="lab-a100-1"')]
    assert "data-backoff" not in healthy

    Host.objects.filter(name="lab-a100-1").update(next_probe_at=None, probe_failures=1)
    html = client_for(seeded.users["alice"]).get("/fleet/?q=lab-a100-1").content.decode()
    assert "Discovery failed 1 time in a row.</p>" in html


def test_hosts_api_items_carry_the_failures_and_the_next_probe(seeded: Any, api: Any) -> None:
    hosts = {h["name"]: h for h in api(seeded.users["alice"]).get("/api/v1/hosts/?source=lab").json()["results"]}
    down, up = hosts["lab-a100-1"], hosts["lab-a100-0"]
    assert down["probe_failures"] == 3 and down["error"] == "ssh: connection timed out after 10 s"
    stored = Host.objects.get(name="lab-a100-1").next_probe_at
    assert datetime.fromisoformat(down["next_probe_at"].replace("Z", "+00:00")) == stored
    assert (up["probe_failures"], up["next_probe_at"]) == (0, None)

