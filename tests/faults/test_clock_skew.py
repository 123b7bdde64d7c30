"""Fault (f): the web server's and the workers' clocks disagree by ±5 minutes.

Real processes, real clocks: the web server (gunicorn) runs with its wall clock 5 minutes behind,
the scheduling pass and the reaper run in worker processes 5 minutes ahead or behind, each shifted
by libfaketime (LD_PRELOAD), against the real PostgreSQL. Expiry is decided by one clock, the
database's (core.db.db_now): a lease renewed by the slow web server is not expired early by the
fast reaper, and a lease past its TTL is expired at once by a slow reaper, not 5 minutes late.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from allocation.models import Lease
from core.db import db_now
from stacktools.ready import wait_until
from tests.faults.agent_fixtures import Figures, faketime_missing_reason, run_skewed, skewed_env
from tests.support.processes import web_server
from tests.support.tokens import api_key

pytestmark = pytest.mark.django_db(transaction=True)

SKEW_S = 300
#: How far a decision may stray from the database's clock: process start-up and round trips,
#: nowhere near the 300 s of skew it must not inherit.
BOUND_S = 10.0
LONG_TTL_S = 600
SHORT_TTL_S = 30  # outlives the early reap however slow the skewed processes start
PASS = "allocation.engine.run_pass"
REAP = "allocation.services.reaper.leases_reap"

CONFIG = {
    "pools": [{"name": "skew"}],
    "teams": [{"name": "vision", "members": ["alice"]}],
    "priority_classes": [{"name": "default", "value": 0}],
    "sources": [{"name": "sim", "kind": "simulated", "pool": "skew", "hosts": 1, "gpus_per_host": 4,
                 "model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559}],
}


@pytest.fixture
def skewed_web(apply_yaml: Any, make_user: Any, tmp_path: Path) -> Any:
    reason = faketime_missing_reason()
    if reason:
        pytest.skip(f"clock-skew tier skipped: {reason}")
    apply_yaml(json.dumps(CONFIG))
    http = requests.Session()
    http.headers["Authorization"] = f"Token {api_key(make_user('alice', teams=('vision',)))}"
    with web_server(tmp_path / "web.log", **skewed_env(f"-{SKEW_S}s")) as url:
        yield http, url


def _lease(lease_id: str) -> Lease:
    return Lease.objects.get(pk=lease_id)


def _at(value: datetime | None) -> datetime:
    assert value is not None, "the lease has no such time yet"
    return value


def test_five_minutes_of_skew_between_web_and_workers_neither_ends_leases_early_nor_keeps_them_late(
        skewed_web: Any) -> None:
    http, url = skewed_web
    figures = Figures("clock_skew")
    figures["faults_injected"] = [f"web clock -{SKEW_S}s", f"worker clock +{SKEW_S}s", f"worker clock -{SKEW_S}s"]

    # The web server's own clock shows in its Date header: proof that the skew is real.
    created = [http.post(f"{url}/api/v1/leases/", json={"pool": "skew", "gpus": 1, "ttl_seconds": ttl},
                         timeout=10) for ttl in (LONG_TTL_S, SHORT_TTL_S)]
    assert [r.status_code for r in created] == [201, 201], [r.text for r in created]
    web_skew = (parsedate_to_datetime(created[0].headers["date"]) - datetime.now(UTC)).total_seconds()
    figures["web_clock_skew_s"] = round(web_skew)
    assert -SKEW_S - 5 < web_skew < -SKEW_S + 5
    long_id, short_id = (r.json()["id"] for r in created)

    # A worker 5 minutes ahead grants: expires_at counts from the database's clock.
    granted = run_skewed(f"+{SKEW_S}s", PASS)
    figures["fast_worker_clock_skew_s"] = round(granted["python_clock"] - granted["db_clock"])
    assert SKEW_S - 5 < granted["python_clock"] - granted["db_clock"] < SKEW_S + 5
    long_lease = _lease(long_id)
    assert long_lease.state == "granted"
    grant_error = abs(_at(long_lease.granted_at).timestamp() - granted["db_clock"])
    assert grant_error < BOUND_S, f"granted_at is {grant_error:.0f} s off the database's clock"
    assert (_at(long_lease.expires_at) - _at(long_lease.granted_at)).total_seconds() == LONG_TTL_S

    # The slow web server renews: the new expiry is the database's now + TTL, not 5 minutes less.
    renewed = http.post(f"{url}/api/v1/leases/{long_id}/renew/", json={"ttl_seconds": LONG_TTL_S}, timeout=10)
    assert renewed.status_code == 200, renewed.text
    renew_error = _at(_lease(long_id).expires_at).timestamp() - (db_now().timestamp() + LONG_TTL_S)
    figures["renewal_expiry_error_s"] = round(renew_error, 2)
    assert abs(renew_error) < BOUND_S

    # The fast reaper sees a lease with 10 minutes left, not one 5 minutes from its end... and the
    # slow web server's renewal did not make it look expired to a reaper 5 minutes ahead.
    early = run_skewed(f"+{SKEW_S}s", REAP)
    assert early["result"]["expired"] == 0, early
    assert _lease(long_id).state == "granted"

    # Past the short lease's TTL, a reaper 5 minutes behind expires it at once, not 5 minutes late.
    short_expires = _at(_lease(short_id).expires_at)
    assert wait_until(lambda: db_now() > short_expires, timeout=SHORT_TTL_S + 5)
    late = run_skewed(f"-{SKEW_S}s", REAP)
    figures["slow_worker_clock_skew_s"] = round(late["python_clock"] - late["db_clock"])
    assert -SKEW_S - 5 < late["python_clock"] - late["db_clock"] < -SKEW_S + 5
    short_lease, long_lease = _lease(short_id), _lease(long_id)
    assert late["result"]["expired"] == 1 and short_lease.state == "expired", late
    lateness = (_at(short_lease.ended_at) - short_expires).total_seconds()
    figures["expired_late_by_s"] = round(lateness, 2)
    assert 0 <= lateness < BOUND_S
    assert long_lease.state == "granted"  # nor did the slow reaper touch the lease with time left
    figures["ended_early"] = 0
    figures["invariant_checks"] = ["no lease expired before its expires_at by the database clock",
                                   f"expired within {BOUND_S:g} s after it", "expires_at - granted_at = TTL"]
    figures.write()
