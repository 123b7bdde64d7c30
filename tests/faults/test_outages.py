"""Fault scenarios (c) and (d): Redis down, and PostgreSQL restarted, under load.

Redis (broker and cache) down: the API keeps answering and keeps accepting leases, which wait
pending; once Redis is back (empty: it keeps nothing on disk), every lease created during the
outage is granted within 2 s without anyone asking again: their triggers, which the broker could
not take, were kept in PostgreSQL (allocation.models.PassWanted), and the first worker to reach
the broker again runs them (pool.celery.CatchUpOnConnect).

PostgreSQL restarted (fast shutdown, down a while, started again): while it is down every API
answer is a JSON 503 with Retry-After, never an HTML page or a stack trace; once it is back, web
and workers recover by themselves, no process restarted.

`make test`: Redis down 10 s, PostgreSQL down 5 s; `make faults`: 60 s and 30 s."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import requests

from stacktools.ready import wait_until
from tests.faults.scenario import FULL, begin, errors_outside, p, record_load, settle_and_check
from tests.faults.stack import Stack

REDIS_DOWN_S = 60 if FULL else 10
PG_DOWN_S = 30 if FULL else 5
PROBES = 8
#: How soon after Redis is back every lease created during its outage must be granted.
REDIS_RECOVERY_BOUND_S = 2
#: How soon after PostgreSQL is back every request must succeed again.
PG_RECOVERY_BOUND_S = 10

pytestmark = [pytest.mark.faults, pytest.mark.timeout(1800 if FULL else 600)]


def _create_probe(stack: Stack, http: requests.Session) -> tuple[int, str | None, float]:
    began = time.monotonic()
    response = http.post(f"{stack.url}/api/v1/leases/", json={"pool": "probe", "gpus": 1, "ttl_seconds": 300},
                         timeout=30)
    lease = response.json().get("id") if response.status_code == 201 else None
    return response.status_code, lease, time.monotonic() - began


def _passes_wanted(stack: Stack) -> int:
    """How many pools have a pass recorded as wanted (triggers the broker could not take)."""
    conn = psycopg2.connect(stack.pg.url())
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(DISTINCT pool_id) FROM allocation_passwanted")
            row = cur.fetchone()
            return int(row[0]) if row else 0
    finally:
        conn.close()


def _granted_at(stack: Stack, leases: list[str]) -> list[float]:
    """The grant time of each lease (epoch seconds), as the pass that granted it recorded it."""
    conn = psycopg2.connect(stack.pg.url())
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT EXTRACT(EPOCH FROM granted_at)::float8 FROM allocation_lease "
                        "WHERE id::text = ANY(%s) AND granted_at IS NOT NULL", [leases])
            return [float(row[0]) for row in cur.fetchall()]
    finally:
        conn.close()


def _states(stack: Stack, http: requests.Session, leases: list[str]) -> list[str]:
    return [stack.api(http, "GET", f"/api/v1/leases/{lease}/")["state"] for lease in leases]


def test_redis_down_the_api_accepts_leases_and_passes_resume_after(stack: Stack, tmp_path: Path) -> None:
    figures, sampler, load = begin(stack, "redis_down", tmp_path)
    http = stack.http("admin")
    time.sleep(3)
    stack.redis.kill()
    down_at = time.monotonic()
    probes: list[str] = []
    latencies: list[float] = []
    statuses: list[int] = []
    while time.monotonic() - down_at < REDIS_DOWN_S:
        status, lease, took = _create_probe(stack, http)
        statuses.append(status)
        latencies.append(took)
        if lease and len(probes) < PROBES:
            probes.append(lease)
        time.sleep(max(0.0, REDIS_DOWN_S / PROBES - took))
    still_pending = _states(stack, http, probes)
    wanted = _passes_wanted(stack)
    stack.redis.start()
    back_at, back_wall = time.monotonic(), time.time()
    every = wait_until(lambda: set(_states(stack, http, probes)) == {"granted"}, timeout=60, interval=0.1)
    api_s = time.monotonic() - back_at
    # When each was granted, by the database's clock (the machine's: one host), not when the
    # API polling above happened to look: that poll reads 8 leases a round on a loaded machine.
    waiting = [lease for lease, state in zip(probes, still_pending, strict=True) if state == "pending"]
    granted = [t - back_wall for t in _granted_at(stack, waiting)]
    for lease in probes:
        http.post(f"{stack.url}/api/v1/leases/{lease}/release/", timeout=30)
    merged = load.finish()
    record_load(figures, merged)
    figures["faults_injected"] = f"redis-server killed, down {REDIS_DOWN_S} s, restarted empty"
    figures["leases_created_during_outage"] = statuses.count(201)
    figures["create_during_outage_ms"] = {"p50": p(latencies, 0.5), "max": round(1000 * max(latencies), 1)}
    # A pass already running or fetched when Redis went may grant the first of them.
    figures["granted_during_outage"] = still_pending.count("granted")
    figures["pools_with_a_pass_wanted_at_return"] = wanted
    figures["first_outage_lease_granted_after_s"] = round(min(granted), 2) if granted else None
    figures["all_outage_leases_granted_after_s"] = round(max(granted), 2) if granted else None
    figures["api_saw_all_granted_after_s"] = round(api_s, 2)
    failures = errors_outside(merged, [])
    figures["5xx_or_conn_errors"] = len(failures)
    settle_and_check(stack, figures, sampler)
    assert set(statuses) == {201}, f"lease creation during the outage answered {sorted(set(statuses))}"
    assert every, f"leases created while Redis was down not granted after it returned\n{stack.dump_logs()}"
    assert max(granted) <= REDIS_RECOVERY_BOUND_S, (
        f"leases of the outage granted {max(granted):.2f} s after Redis returned (bound: {REDIS_RECOVERY_BOUND_S} s)")
    assert not failures, failures[:10]


def _is_json_503(error: dict[str, Any]) -> bool:
    return bool(error["status"] == 503 and error.get("json") and error.get("retry_after"))


def test_postgres_restart_gives_json_503_then_everything_recovers(stack: Stack, tmp_path: Path) -> None:
    figures, sampler, load = begin(stack, "postgres_restart", tmp_path)
    http = stack.http("admin")
    time.sleep(3)
    stopped_at = time.time()
    stack.pg.stop()
    checks = []
    while time.time() - stopped_at < PG_DOWN_S:  # the API as a client sees it during the outage
        for path in ("/api/v1/leases/", "/api/v1/pools/", "/api/v1/gpus/?pool=a"):
            response = http.get(f"{stack.url}{path}", timeout=30)
            checks.append((response.status_code, response.headers.get("content-type", ""),
                           response.headers.get("retry-after"), response.text[:200]))
        time.sleep(0.5)
    stack.pg.start()
    back_at = time.time()
    ok = wait_until(lambda: http.get(f"{stack.url}/api/v1/pools/", timeout=30).status_code == 200, timeout=60)
    web_s = time.time() - back_at
    status, lease, _ = _create_probe(stack, http)
    assert lease is not None, f"no lease after PostgreSQL came back ({status})"
    granted = wait_until(lambda: _states(stack, http, [lease])[0] == "granted", timeout=60, interval=0.1)
    worker_s = time.time() - back_at
    http.post(f"{stack.url}/api/v1/leases/{lease}/release/", timeout=30)
    time.sleep(3)
    merged = load.finish()
    record_load(figures, merged)
    window = (stopped_at - 2, back_at + PG_RECOVERY_BOUND_S)
    during = [e for e in merged["errors"] if window[0] <= e["t"] <= window[1]]
    failures = errors_outside(merged, [window])
    figures["faults_injected"] = f"PostgreSQL fast shutdown, down {PG_DOWN_S} s, started again"
    figures["answers_during_outage"] = len(checks) + len(during)
    figures["json_503_with_retry_after"] = sum(1 for c in checks if c[0] == 503 and "json" in c[1] and c[2]) + sum(
        1 for e in during if _is_json_503(e))
    figures["web_recovered_after_s"] = round(web_s, 2)
    figures["worker_granted_after_s"] = round(worker_s, 2)
    figures["errors_outside_outage"] = len(failures)
    settle_and_check(stack, figures, sampler)
    bad = [c for c in checks if not (c[0] == 503 and "application/json" in c[1] and c[2])]
    assert not bad, f"answers during the outage that are not JSON 503 with Retry-After: {bad[:5]}"
    assert not [e for e in during if e["status"] and not _is_json_503(e)], during[:5]
    assert ok and status == 201 and granted, f"not recovered\n{stack.dump_logs()}"
    assert not failures, failures[:10]
