"""Fault scenario (b): `kill -9` under load, of a worker in the middle of scheduling passes, of the
web server, and of beat (none at all; then two at once: one leads, and the standby takes over
when the leader is killed).

A kill takes the process group (Celery's and gunicorn's pool workers too), as the OOM killer or a
lost node would. A worker is killed while it holds a pool's scheduling lock (seen in pg_locks,
named by its `application_name`): its pass's transaction dies with its connection, nothing of it
is half-written, and the other worker's passes go on. A probe lease in a pool of its own (the load
never touches it) measures how soon scheduling answers after each kill.

`make test`: 5 worker kills, 2 web kills; `make faults`: 100 and 10."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from stacktools.ready import wait_until
from tests.faults.scenario import FULL, begin, errors_outside, p, record_load, settle_and_check
from tests.faults.stack import Proc, Stack

WORKER_KILLS = 100 if FULL else 5
WEB_KILLS = 10 if FULL else 2
IN_FLIGHT_S = 2.0
POOL_LOCKS = 0x6770  # core.db.POOL_LOCKS: the advisory lock a pass holds on its pool

pytestmark = [pytest.mark.faults, pytest.mark.timeout(3600 if FULL else 600)]


def pass_lock_holder(conn: Any) -> str | None:
    """The application_name of the process holding a pool's scheduling lock now, if any."""
    with conn.cursor() as cur:
        cur.execute("SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint >> 16 = %s LIMIT 1",
                    [POOL_LOCKS])
        row = cur.fetchone()
    return str(row[0]) if row else None


def probe(stack: Stack, http: Any) -> float:
    """Create a 1-GPU lease in the probe pool; seconds until a pass granted it (then released)."""
    began = time.monotonic()
    lease = stack.api(http, "POST", "/api/v1/leases/", json={"pool": "probe", "gpus": 1, "ttl_seconds": 60})["id"]
    granted = wait_until(lambda: stack.api(http, "GET", f"/api/v1/leases/{lease}/")["state"] == "granted",
                         timeout=60, interval=0.05)
    elapsed = time.monotonic() - began
    http.post(f"{stack.url}/api/v1/leases/{lease}/release/", timeout=30)
    assert granted, f"probe lease {lease} not granted in 60 s\n{stack.dump_logs()}"
    return elapsed


def test_kill9_of_a_worker_in_the_middle_of_passes(stack: Stack, tmp_path: Path) -> None:
    figures, sampler, load = begin(stack, "kill9_worker", tmp_path)
    http = stack.http("admin")
    rng = random.Random(7)
    mid_pass, restarts, recoveries = 0, [], []
    watch = psycopg2.connect(stack.pg.url())
    watch.autocommit = True
    for _ in range(WORKER_KILLS):
        holder = wait_until(lambda: pass_lock_holder(watch), timeout=10, interval=0.005)
        name = holder if holder in ("worker-a", "worker-b") else rng.choice(("worker-a", "worker-b"))
        mid_pass += holder == name
        stack.procs[name].kill9()
        recoveries.append(probe(stack, http))  # the other worker schedules meanwhile
        restarts.append(stack.procs[name].start())
    watch.close()
    merged = load.finish()
    record_load(figures, merged)
    figures["faults_injected"] = f"{WORKER_KILLS} × kill -9 of a worker (process group)"
    figures["kills_mid_pass"] = mid_pass
    figures["probe_grant_after_kill_s"] = {"p50": p(recoveries, 0.5) / 1000, "max": round(max(recoveries), 2)}
    figures["worker_restart_s"] = {"p50": p(restarts, 0.5) / 1000, "max": round(max(restarts), 2)}
    failures = errors_outside(merged, [])
    figures["5xx_or_conn_errors"] = len(failures)
    settle_and_check(stack, figures, sampler)
    assert not failures, failures[:10]
    assert mid_pass >= WORKER_KILLS // 2, f"only {mid_pass} of {WORKER_KILLS} kills caught a pass in flight"


def test_kill9_of_the_web_server_under_load(stack: Stack, tmp_path: Path) -> None:
    figures, sampler, load = begin(stack, "kill9_web", tmp_path)
    windows, downtime = [], []
    web = stack.procs["web"]
    for _ in range(WEB_KILLS):
        time.sleep(3)  # under load for a while first
        began = time.time()
        web.kill9()
        downtime.append(web.start())
        # Requests in flight when it died fail too: the window opens a little before the kill.
        windows.append((began - IN_FLIGHT_S, time.time() + 0.5))
    time.sleep(3)
    merged = load.finish()
    record_load(figures, merged)
    figures["faults_injected"] = f"{WEB_KILLS} × kill -9 of gunicorn (master and workers)"
    figures["web_back_after_s"] = {"p50": p(downtime, 0.5) / 1000, "max": round(max(downtime), 2)}
    during = [e for e in merged["errors"] if e not in errors_outside(merged, windows)]
    figures["failed_requests_during_outages"] = len(during)
    figures["5xx_during_outages"] = sum(1 for e in during if e["status"] >= 500)
    failures = errors_outside(merged, windows)
    figures["5xx_or_conn_errors_outside_outages"] = len(failures)
    settle_and_check(stack, figures, sampler)
    assert not failures, failures[:10]


def _beat_sent(proc: Proc) -> int:
    return proc.log_since_start().count("Sending due task schedule-pass")


def test_kill9_of_beat_and_two_beats_and_none(stack: Stack, tmp_path: Path) -> None:
    figures, sampler, load = begin(stack, "kill9_beat", tmp_path)
    http = stack.http("admin")
    beat = stack.procs["beat"]
    # Killed: the next periodic pass is sent within one interval of the restart.
    beat.kill9()
    none_probe = probe(stack, http)  # no beat at all: event-driven passes still grant
    began = time.monotonic()
    beat.start()
    assert wait_until(lambda: _beat_sent(beat) > 0, timeout=30), beat.tail()
    figures["beat_first_pass_after_restart_s"] = round(time.monotonic() - began, 2)
    figures["probe_grant_with_no_beat_s"] = round(none_probe, 2)
    # Two beats at once: the second stands by (core/beat.py) and sends nothing while the first
    # leads; kill -9 the leader and the second sends the next periodic pass.
    second = Proc("beat-2", beat.argv, stack.env("beat-2"), tmp_path / "beat-2.log", beat.ready)
    second.start()
    assert wait_until(lambda: "beat: standing by" in second.log_since_start(), timeout=30), second.tail()
    leader_sent = _beat_sent(beat)
    assert wait_until(lambda: _beat_sent(beat) >= leader_sent + 2, timeout=30), beat.tail()  # two passes, side by side
    figures["standby_passes_sent_while_the_leader_runs"] = _beat_sent(second)
    beat.kill9()
    began = time.monotonic()
    assert wait_until(lambda: _beat_sent(second) > 0, timeout=30), second.tail()
    figures["standby_first_pass_after_leader_kill9_s"] = round(time.monotonic() - began, 2)
    # Back as the stack had it: the restarted beat stands by, then leads once the second is killed.
    beat.start()
    second.kill9()
    assert wait_until(lambda: _beat_sent(beat) > 0, timeout=30), beat.tail()
    merged = load.finish()
    record_load(figures, merged)
    figures["faults_injected"] = "kill -9 of beat, no beat, a standby beat, kill -9 of the leading beat"
    failures = errors_outside(merged, [])
    figures["5xx_or_conn_errors"] = len(failures)
    settle_and_check(stack, figures, sampler)
    assert figures["standby_passes_sent_while_the_leader_runs"] == 0
    assert not failures, failures[:10]
