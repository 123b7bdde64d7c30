"""The per-user lease rate is one limit across web processes: two production web servers
(gunicorn + uvicorn on pool.asgi, each its own process and Redis client) and concurrent clients
hammering both with one user's lease requests get, over the window, the token bucket's count
within 1%: its burst plus its refill over the window, not a burst per process."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.support.processes import web_server

pytestmark = [pytest.mark.slow]

RATE = (20, 1)  # GPUPOOL_LEASE_RATE=20/s: a burst of 20, then 20 a second (the clients ask for more)
WINDOW_S = 12.0
CLIENTS = 8
FLEET = """
pools: [{name: p, queue_caps: {pending_leases_per_team: null}}]
teams: [{name: a, members: [ann]}]
sources: [{name: sim, kind: simulated, pool: p, hosts: 1, gpus_per_host: 8}]
"""


@pytest.fixture(scope="module")
def servers(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: Any) -> Iterator[list[str]]:
    """Two web servers of one worker process each, the rate set as production sets it."""
    env = {"GPUPOOL_AUTOSCHEDULE": "0", "GPUPOOL_LEASE_RATE": f"{RATE[0]}/s"}
    logs = tmp_path_factory.mktemp("web")
    with django_db_blocker.unblock(), web_server(logs / "one.log", **env) as one, \
            web_server(logs / "two.log", **env) as two:
        yield [one, two]


def test_two_web_processes_let_one_user_through_at_the_limit_within_one_percent(
        servers: list[str], transactional_db: Any, apply_yaml: Any, make_user: Any) -> None:
    from allocation.api.throttles import KEY_PREFIX
    from allocation.events import redis_client
    from allocation.models import Lease
    from tests.support.tokens import api_key

    for key in redis_client().scan_iter(match=f"{KEY_PREFIX}:*", count=1000):
        redis_client().delete(key)
    token = api_key(make_user("ann", teams=("a",)))
    apply_yaml(FLEET)
    statuses: Counter[int] = Counter()
    lock, start = threading.Lock(), threading.Barrier(CLIENTS + 1)
    times: list[float] = []  # the middle of each round trip: when the server took it, within half of one

    def client(i: int) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        url = servers[i % 2] + "/api/v1/leases/"  # half the clients on each process
        start.wait()
        while time.monotonic() < deadline:
            sent = time.monotonic()
            status = session.post(url, json={"pool": "p", "gpus": 1}, timeout=30).status_code
            with lock:
                statuses[status] += 1
                times.append((sent + time.monotonic()) / 2)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + WINDOW_S
    start.wait()
    for t in threads:
        t.join()
    window = max(times) - min(times)
    allowed = RATE[0] + RATE[0] / RATE[1] * window
    created = statuses[201]
    assert set(statuses) == {201, 429}, statuses
    assert statuses[429] > 0.2 * created  # the clients asked for more than the limit all along
    assert abs(created - allowed) <= 0.01 * allowed, (created, allowed, window, statuses)
    assert Lease.objects.count() == created
