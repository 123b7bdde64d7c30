"""The whole chain with real processes: HTTP request → broker → Celery worker → grant → release.

Runs on PostgreSQL with the Redis broker, as every deployment does.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.processes import celery_worker
from tests.support.tokens import api_key


def _wait_for(fetch: Any, predicate: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    value = fetch()
    while not predicate(value) and time.monotonic() < deadline:
        time.sleep(0.2)
        value = fetch()
    return value


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_grants_a_posted_lease_within_seconds_and_release_frees_it(
        live_server: Any, demo_fleet: Any, make_user: Any, settings: Any, tmp_path: Path) -> None:
    settings.GPUPOOL = {**settings.GPUPOOL, "AUTOSCHEDULE": True}
    if settings.CELERY_BROKER_URL.startswith("redis"):
        from pool.celery import app

        app.control.purge()
    alice = make_user("alice", teams=("vision",))
    token = api_key(alice)
    http = requests.Session()
    http.headers["Authorization"] = f"Token {token}"
    with celery_worker(tmp_path / "worker.log", GPUPOOL_AUTOSCHEDULE="1"):
        created = http.post(f"{live_server.url}/api/v1/leases/",
                            json={"pool": "training", "gpus": 2}, timeout=10)
        assert created.status_code == 201, created.text
        lease_url = f"{live_server.url}/api/v1/leases/{created.json()['id']}/"
        started = time.monotonic()
        lease = _wait_for(lambda: http.get(lease_url, timeout=10).json(),
                          lambda body: body["state"] == "granted")
        assert lease["state"] == "granted", (lease, (tmp_path / "worker.log").read_text()[-2000:])
        assert time.monotonic() - started < 10
        assert len(lease["gpus"]) == 2

        gpus = http.get(f"{live_server.url}/api/v1/gpus/?state=leased", timeout=10).json()
        assert sorted(g["uuid"] for g in gpus["results"]) == sorted(lease["gpus"])
        released = http.post(lease_url + "release/", json={}, timeout=10).json()
        assert released["state"] == "released"
        assert http.get(f"{live_server.url}/api/v1/gpus/?state=leased", timeout=10).json()["count"] == 0
    print(f"broker: {settings.CELERY_BROKER_URL.split(':')[0]}, database: "
          f"{settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}")
