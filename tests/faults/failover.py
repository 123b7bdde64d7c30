"""What a database failover scenario (tests/faults/test_patroni.py) measures beside the load:

- `WriteProbe`: a database client of its own that commits a transaction id every 0.1 s through the
  cluster's multi-host URL (reconnecting after each failure, as gpupool's processes do): the
  longest gap between two of its commits around an event is the time without a writable primary,
  as a client saw it;
- `KeyedCreator`: an API client that creates leases with an Idempotency-Key and, on a 503 or a
  dropped connection, sends the same request with the same key again until it has an answer: a
  create whose COMMIT met the failover (done or not, the client cannot tell) must come back as one
  lease, never two;
- `probe_grant`: how soon after an event a pass grants a new lease (the `probe` pool, untouched by
  the load);
- `acked_lost`: which acknowledged writes are gone afterwards (a lease a 201 named, a release a 200
  confirmed);
- `failures`: the failed requests of one event window, and which of them were not a JSON 503 with
  Retry-After.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from bisect import bisect_left
from typing import Any

import psycopg2
import requests

from tests.faults.stack import Stack


class WriteProbe(threading.Thread):
    """Commits `SELECT txid_current()` (a write: it takes a transaction id, and its commit waits
    for the synchronous standby) every `interval` s; keeps the time of every commit."""

    def __init__(self, url: str, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.url, self.interval = url, interval
        self.commits: list[float] = []
        self.failures = 0
        self.halt = threading.Event()

    def run(self) -> None:
        conn = None
        while not self.halt.is_set():
            try:
                if conn is None:
                    conn = psycopg2.connect(self.url, connect_timeout=2, application_name="write-probe")
                    conn.autocommit = True
                with conn.cursor() as cur:
                    cur.execute("SET statement_timeout = '5s'; SELECT txid_current()")
                # A timeout that cancels the wait for the standby still commits (locally only),
                # with a warning: not a replicated commit, so not counted as one.
                unreplicated = any("synchronous replication" in notice for notice in conn.notices)
                conn.notices.clear()
                if unreplicated:
                    raise psycopg2.OperationalError("commit not confirmed by the synchronous standby")
                self.commits.append(time.time())
            except psycopg2.Error:
                self.failures += 1
                if conn is not None:
                    conn.close()
                conn = None
            self.halt.wait(self.interval)
        if conn is not None:
            conn.close()

    def stop(self) -> WriteProbe:
        self.halt.set()
        self.join(timeout=30)
        return self

    def gap(self, since: float, until: float) -> float:
        """The longest time without a commit between the last commit before `since` and the
        first after `until` (seconds; the probe's own 0.1 s pace included)."""
        commits = self.commits
        first = max(0, bisect_left(commits, since) - 1)
        last = min(len(commits) - 1, bisect_left(commits, until))
        window = commits[first:last + 1]
        return round(max((b - a for a, b in itertools.pairwise(window)), default=0.0), 2)


class KeyedCreator(threading.Thread):
    """Creates a 1-GPU lease in `pool` with a fresh Idempotency-Key every `interval` s, sending
    it again with the same key while the answer is a 5xx or no answer; then releases it (also
    retried: a release is idempotent). `outcomes`: key → (lease id, final status, attempts):
    201 created by that answer, 200 a replay of the lease an earlier attempt created."""

    def __init__(self, stack: Stack, user: str, pool: str = "a", interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.base = f"{stack.url}/api/v1"
        self.http = stack.http(user)
        self.pool, self.interval = pool, interval
        self.outcomes: dict[str, tuple[str, int, int]] = {}
        self.refused: list[str] = []  # a 4xx: nothing to retry, named in the figures
        self.gave_up = 0  # keys with no answer within 120 s
        self.halt = threading.Event()

    def _send(self, method: str, path: str, **kwargs: Any) -> tuple[requests.Response | None, int]:
        """The request, sent again (the same request, the same key) until an answer below 500;
        (None, attempts) after 120 s without one. Finished even once stopped: a key given up
        in the middle of an outage would leave its outcome unknown."""
        attempts, deadline = 0, time.monotonic() + 120
        while time.monotonic() < deadline:
            attempts += 1
            try:
                response = self.http.request(method, self.base + path, timeout=30, **kwargs)
                if response.status_code < 500:
                    return response, attempts
            except requests.RequestException:
                pass
            time.sleep(0.2)
        return None, attempts

    def run(self) -> None:
        while not self.halt.is_set():
            key = str(uuid.uuid4())
            body = {"pool": self.pool, "gpus": 1, "ttl_seconds": 30}
            response, attempts = self._send("POST", "/leases/", json=body, headers={"Idempotency-Key": key})
            if response is None:
                self.gave_up += 1
                continue
            if response.status_code not in (200, 201):
                self.refused.append(f"{response.status_code} {response.text[:200]}")
                continue
            lease = response.json()["id"]
            self.outcomes[key] = (lease, response.status_code, attempts)
            self._send("POST", f"/leases/{lease}/release/")
            self.halt.wait(self.interval)

    def stop(self) -> KeyedCreator:
        self.halt.set()
        self.join(timeout=120)
        return self


def keyed_duplicates(url: str, outcomes: dict[str, tuple[str, int, int]]) -> list[str]:
    """The keys whose leases in the database are not exactly the one lease the client was given."""
    conn = psycopg2.connect(url, connect_timeout=5)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT idempotency_key, array_agg(id::text) FROM allocation_lease "
                        "WHERE idempotency_key = ANY(%s) GROUP BY idempotency_key", [list(outcomes)])
            found = {key: ids for key, ids in cur.fetchall()}
    finally:
        conn.close()
    return [key for key, (lease, *_) in outcomes.items() if found.get(key) != [lease]]


def acked_lost(url: str, created: list[str], released: list[str]) -> dict[str, list[str]]:
    """Acknowledged writes that are gone: leases a create answered 201 for and the database does
    not have; leases a release answered 200 for that are not ended."""
    conn = psycopg2.connect(url, connect_timeout=5)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id::text, state FROM allocation_lease WHERE id = ANY(%s::uuid[])",
                        [sorted(set(created) | set(released))])
            states = dict(cur.fetchall())
    finally:
        conn.close()
    active = ("pending", "granted", "bound")
    return {"creates_missing": [lease for lease in created if lease not in states],
            "releases_undone": [lease for lease in released if states.get(lease) in active]}


def probe_grant(stack: Stack, since: float, timeout: float = 90) -> float:
    """Seconds from `since` (time.time()) until a new lease in the probe pool is granted: created
    with an Idempotency-Key (so the retries across the outage make one lease), then released."""
    http = stack.http("admin")
    key = str(uuid.uuid4())
    lease = stack.api(http, "POST", "/api/v1/leases/", timeout=timeout, headers={"Idempotency-Key": key},
                      json={"pool": "probe", "gpus": 1, "ttl_seconds": 120})["id"]
    deadline = time.monotonic() + timeout
    while stack.api(http, "GET", f"/api/v1/leases/{lease}/", timeout=timeout)["state"] != "granted":
        assert time.monotonic() < deadline, (
            f"probe lease {lease} not granted within {timeout:.0f} s\n{stack.dump_logs()}")
        time.sleep(0.05)
    took = time.time() - since
    stack.api(http, "POST", f"/api/v1/leases/{lease}/release/", timeout=timeout)
    return round(took, 2)


def is_json_503(error: dict[str, Any]) -> bool:
    return bool(error["status"] == 503 and error.get("json") and error.get("retry_after"))


def failures(errors: list[dict[str, Any]], since: float, until: float) -> dict[str, Any]:
    """The load's failed requests sent in [since, until]: how many, over how long, and every one
    that was not a JSON 503 with Retry-After (an HTML page, a 500, a dropped connection)."""
    inside = sorted((e for e in errors if since <= e["t"] <= until), key=lambda e: e["t"])
    other = [e for e in inside if not is_json_503(e)]
    return {"failed_requests": len(inside), "json_503_with_retry_after": len(inside) - len(other),
            "failure_window_s": round(inside[-1]["t"] - inside[0]["t"], 2) if inside else 0.0,
            "not_json_503": [{k: e.get(k) for k in ("op", "status", "detail")} for e in other[:5]],
            "not_json_503_count": len(other)}


# How far along its life each lease state is: an event names a state the lease reached, so the
# database must show that state or a later one, unless the transition was lost.
_RANK = {"pending": 0, "granted": 1, "bound": 2}


def stream_not_in_database(redis_url: str, db_url: str, since: float) -> list[str]:
    """Lease events published to the event stream since `since` (time.time()) whose transition
    the database does not have: the lease is missing, or it is in an earlier state than the
    event says it reached. The relay publishes each committed transition within a second, from
    the primary that committed it; a failover that loses commits leaves their events in Redis,
    the one record of them outside the database."""
    import redis

    from allocation.events import STREAM

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    entries: Any = client.xrange(STREAM, min=f"{int(since * 1000)}-0", max="+")
    events: list[dict[str, str]] = [dict(fields) for _, fields in entries]
    conn = psycopg2.connect(db_url, connect_timeout=5)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id::text, state FROM allocation_lease WHERE id = ANY(%s::uuid[])",
                        [sorted({e["lease"] for e in events})])
            states = dict(cur.fetchall())
    finally:
        conn.close()
    return [f"{e['lease']} {e['state']} (database: {states.get(e['lease'], 'missing')})" for e in events
            if e["lease"] not in states or _RANK.get(states[e["lease"]], 3) < _RANK.get(e["state"], 3)]
