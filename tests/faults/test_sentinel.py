"""Fault scenario: Redis high availability. The stack's Redis is a Sentinel group of its own (a
master, a replica, three sentinels, quorum 2, failure detection after 1 s: sentinel_group.py), and
every process reaches it through REDIS_SENTINELS; under the storm load the master is killed with
SIGKILL.

What must hold: the sentinels promote the replica within seconds and every process follows it
without a restart (web, both workers, beat); API requests meanwhile are answered (a failure, if
any, is a JSON 503, never a 500); no lease the API acknowledged is lost; the invariants hold;
passes resume (a lease created during the failover is granted without anyone asking again: its
trigger, which no broker took, was kept in PostgreSQL); the event stream follows too (a watcher
sees a new lease's grant), and no lease event is lost: what could not be published while there
was no master waits in the outbox and is relayed, and every published event is in the new
master's stream (the outbox check every scenario ends with, tests/faults/events_check.py). The
old master is then started again, empty, and the sentinels make it a replica of the new one.

`make test`: one failover; `make faults` (GPUPOOL_FAULTS=full): five, each old master rejoining
as a replica before the next kill."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import requests

from stacktools.ready import wait_until
from tests.faults import servers
from tests.faults.failover import acked_lost
from tests.faults.scenario import FULL, begin, config, p, record_load, settle_and_check, users
from tests.faults.sentinel_group import SentinelGroup, missing_reason
from tests.faults.stack import Stack

FAILOVERS = 5 if FULL else 1
#: From the kill: the sentinels detect the master down after 1 s, then elect and promote.
PROMOTED_BOUND_S = 30
#: From the promotion: a lease created during the failover is granted (processes followed).
PASSES_BOUND_S = 10

pytestmark = [pytest.mark.faults, pytest.mark.timeout(3600 if FULL else 600)]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: Any) -> Iterator[Stack]:
    """The fault stack with a Sentinel group for its Redis (this module's own)."""
    reason = servers.missing_reason() or missing_reason()
    if reason:
        pytest.skip(f"Redis HA tier skipped: {reason}")
    root = tmp_path_factory.mktemp("stack")
    built = Stack(root, config(), users(), redis=SentinelGroup(root))
    try:
        built.start()
        yield built
    finally:
        built.stop()


class EventWatch(threading.Thread):
    """The API's event stream of the probe pool, read as a client would (Server-Sent Events)."""

    def __init__(self, stack: Stack, http: requests.Session, timeout_s: float = 60) -> None:
        super().__init__(daemon=True)
        self.url = f"{stack.url}/api/v1/leases/events/?pool=probe&timeout={timeout_s:g}"
        self.http, self.opened = http, threading.Event()
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.error: str | None = None

    def run(self) -> None:
        try:
            with self.http.get(self.url, stream=True, timeout=(5, 90)) as response:
                for line in response.iter_lines(decode_unicode=True):
                    if line.startswith("event: bookmark"):
                        self.opened.set()
                    elif line.startswith("data: ") and self.opened.is_set() and line != "data: {}":
                        self.events.append((time.monotonic(), json.loads(line[len("data: "):])))
        except requests.RequestException as error:
            self.error = type(error).__name__
        finally:
            self.opened.set()

    def seen(self, lease: str, state: str) -> float | None:
        return next((t for t, body in self.events if body.get("id") == lease and body.get("state") == state), None)


def _probe(stack: Stack, http: requests.Session) -> tuple[int, str | None]:
    response = http.post(f"{stack.url}/api/v1/leases/", json={"pool": "probe", "gpus": 1, "ttl_seconds": 60},
                         timeout=30)
    return response.status_code, response.json().get("id") if response.status_code == 201 else None


def _state(stack: Stack, http: requests.Session, lease: str) -> str:
    return str(stack.api(http, "GET", f"/api/v1/leases/{lease}/")["state"])


def _events_after_failover(stack: Stack, http: requests.Session) -> float:
    """Seconds from a new lease's creation until a watcher of the event stream sees its grant."""
    watch = EventWatch(stack, http)
    watch.start()
    assert watch.opened.wait(30) and watch.error is None, f"event stream did not open: {watch.error}"
    began = time.monotonic()
    status, lease = _probe(stack, http)
    assert lease, f"probe lease not created after the failover ({status})"
    seen = wait_until(lambda: watch.seen(lease, "granted"), timeout=30, interval=0.05)
    http.post(f"{stack.url}/api/v1/leases/{lease}/release/", timeout=30)
    assert seen, f"no grant of {lease} on the event stream within 30 s (got {len(watch.events)} events)"
    return float(seen) - began


def _granted_at(stack: Stack, lease: str) -> float:
    """When the lease was granted (epoch seconds), as the pass that granted it recorded it."""
    with psycopg2.connect(stack.pg.url()) as conn, conn.cursor() as cur:
        cur.execute("SELECT EXTRACT(EPOCH FROM granted_at)::float8 FROM allocation_lease WHERE id = %s", [lease])
        row = cur.fetchone()
    conn.close()
    assert row and row[0] is not None, f"lease {lease} has no grant time"
    return float(row[0])


def _beat_sent_after(stack: Stack, after: float) -> float | None:
    """When beat first sent a periodic task successfully after `after` (epoch seconds): a
    'Sending due task' line of its log not followed by a 'Message Error' before the next one."""
    lines = [line for line in stack.procs["beat"].log_since_start().splitlines()
             if "Sending due task" in line or "Message Error" in line]
    for line, following in zip(lines, [*lines[1:], ""], strict=True):
        if "Sending due task" not in line or "Message Error" in following:
            continue
        stamp = time.mktime(time.strptime(line[1:20], "%Y-%m-%d %H:%M:%S")) + int(line[21:24]) / 1000
        if stamp > after:
            return stamp
    return None


def _failover(stack: Stack, group: SentinelGroup, http: requests.Session) -> dict[str, Any]:
    """Kill the master; the figures of one failover (seconds)."""
    old = group.kill_master()
    killed = time.time()
    status, lease = _probe(stack, http)  # during the failover: accepted, its trigger kept
    new = group.wait_failover(old, timeout=PROMOTED_BOUND_S)
    promoted = time.time()
    assert lease, f"a lease created while the master was down was refused ({status})"
    granted = wait_until(lambda: _state(stack, http, lease) == "granted", timeout=60, interval=0.05)
    http.post(f"{stack.url}/api/v1/leases/{lease}/release/", timeout=30)
    assert granted, f"the lease created during the failover was not granted within 60 s\n{stack.dump_logs()}"
    resumed = _granted_at(stack, lease)
    beat = wait_until(lambda: _beat_sent_after(stack, promoted), timeout=30, interval=0.2)
    assert beat, f"beat sent nothing after the failover\n{stack.procs['beat'].tail()}"
    event_s = _events_after_failover(stack, http)
    group.restart(old)  # empty, as a server whose disk was lost: the sentinels make it a replica
    rejoined = wait_until(lambda: group.replica_of(old, new), timeout=60, interval=0.2)
    assert rejoined, f"the old master {old} did not rejoin as a replica of {new}\n{group.logs()}"
    return {"promoted_s": promoted - killed, "probe_granted_after_kill_s": resumed - killed,
            "probe_granted_after_promotion_s": resumed - promoted, "beat_sent_after_promotion_s": beat - promoted,
            "event_seen_s": event_s, "old_master_rejoined_s": time.time() - killed, "window": (killed, time.time())}


def test_sentinel_failover_under_load_loses_nothing(stack: Stack, tmp_path: Path) -> None:
    group = stack.redis
    assert isinstance(group, SentinelGroup)
    figures, sampler, load = begin(stack, "sentinel_failover", tmp_path)
    http = stack.http("admin")
    rounds = []
    for _ in range(FAILOVERS):
        time.sleep(3)  # under load for a while first
        rounds.append(_failover(stack, group, http))
    merged = load.finish()
    record_load(figures, merged)
    windows = [r.pop("window") for r in rounds]
    during = [e for e in merged["errors"] if any(a - 2 <= e["t"] <= b for a, b in windows)]
    outside = [e for e in merged["errors"] if e not in during]
    bad = [e for e in merged["errors"] if not (e["status"] == 503 and e.get("json"))]
    figures["faults_injected"] = f"{FAILOVERS} × kill -9 of the Redis master (Sentinel group: 1 replica, 3 sentinels)"
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        figures[key] = round(values[0], 2) if len(values) == 1 else {"p50": round(p(values, 0.5) / 1000, 2),
                                                                      "max": round(max(values), 2)}
    figures["requests_failed_during_failover"] = len(during)
    figures["requests_failed_not_json_503"] = len(bad)
    lost = acked_lost(stack.pg.url(), merged["acked_creates"], merged["acked_releases"])
    figures["acknowledged_creates"] = len(merged["acked_creates"])
    figures["acknowledged_releases"] = len(merged["acked_releases"])
    figures["acknowledged_writes_lost"] = {k: len(v) for k, v in lost.items()}
    # Then the invariants, and the lease events (tests/faults/events_check.py, on the new master):
    # none left unpublished, none missing from the stream, none twice, each lease's in order.
    settle_and_check(stack, figures, sampler)
    assert not bad, f"failed requests that are not JSON 503s: {bad[:5]}"
    assert not outside, f"failed requests outside the failovers: {outside[:5]}"
    assert not any(lost.values()), f"acknowledged writes lost: {lost}"
    assert all(r["probe_granted_after_promotion_s"] <= PASSES_BOUND_S for r in rounds), rounds
