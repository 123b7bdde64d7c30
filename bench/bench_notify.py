"""Notification latency through the real stack: from a lease's grant (its transition's commit) to a
webhook receiver reading the signed POST.

    python bench/bench_notify.py [--samples 200] [--redis-db 7] [--database gpupool_bench_notify]

The production stack (web, scheduler worker, worker, beat; PostgreSQL + Redis) with a small
simulated fleet and one configured webhook target of `lease.granted` with `granted_after_s: 0`
(every grant notifies). One client asks for 1 GPU, waits for the grant (long poll) and releases it,
one lease after another; a receiver on loopback notes when each POST arrives. A sample is the
arrival time less the event's `occurred_at` (the outbox row's time, taken in the granting
transaction just before its commit: it slightly overstates the latency after the commit), as
deployed: a delivery run asked for after every commit, and beat's run every second behind it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _stack
from tests.support.webhook_receiver import WebhookReceiver

SECRET = "bench-secret-0123456789"
CONFIG = """pools: [{name: bench}]
teams: [{name: lat, members: [lat]}]
priority_classes: [{name: default, value: 0}]
sources: [{name: sim, kind: simulated, pool: bench, hosts: 4, gpus_per_host: 8, interval_s: 3600}]
notifications:
  - {name: bench, kind: webhook, url: "%(url)s", events: [lease.granted], granted_after_s: 0, secret: %(secret)s}
"""


def phase(session: requests.Session, api: str, receiver: WebhookReceiver, n: int) -> list[float]:
    """Latencies (s) of `n` grants, each waited for at the receiver before the next."""
    out = []
    for _ in range(n):
        before = len(receiver.received)
        lease = session.post(api + "leases/", json={"pool": "bench", "gpus": 1}, timeout=30).json()
        while lease["state"] == "pending":
            lease = session.get(api + f"leases/{lease['id']}/", params={"wait": "10", "state": "pending"},
                                timeout=30).json()
        deadline = time.monotonic() + 10
        while len(receiver.received) == before and time.monotonic() < deadline:
            time.sleep(0.001)
        hit = receiver.received[-1]
        assert hit.json["lease"]["id"] == lease["id"] and hit.signed_with(SECRET), hit.json
        occurred = datetime.fromisoformat(hit.json["occurred_at"].replace("Z", "+00:00")).timestamp()
        out.append(hit.at - occurred)
        session.post(api + f"leases/{lease['id']}/release/", json={}, timeout=30)
    return out


def report(name: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (f"  {name:32s} p50 {statistics.median(ms):7.1f} ms  p99 {_stack.percentile(ms, 0.99):7.1f} ms  "
            f"max {max(ms):7.1f} ms  ({len(ms)} events)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--redis-db", type=int, default=7, help="a Redis db of its own: it is flushed")
    parser.add_argument("--database", default="gpupool_bench_notify", help="created afresh and dropped after")
    args = parser.parse_args()
    receiver = WebhookReceiver().start()
    db = _stack.fresh_database(args.database)
    try:
        env = _stack.environment(db, redis_db=args.redis_db, GPUPOOL_AUTOSCHEDULE="1",
                                 GPUPOOL_LEASE_RATE="10000000/min")
        _stack.setup(env, CONFIG % {"url": receiver.url, "secret": SECRET})
        tokens = _stack.tokens(env, ["lat"])
        with _stack.running(env) as (url, _procs):
            session = requests.Session()
            session.headers["Authorization"] = f"Token {tokens['lat']}"
            phase(session, url + "/api/v1/", receiver, 5)  # warm-up
            results = {"after commit + beat (deployed)": phase(session, url + "/api/v1/", receiver, args.samples)}
    finally:
        receiver.stop()
        _stack.drop_database(db)
    print("grant committed → signed webhook read by the receiver:")
    for name, values in results.items():
        print(report(name, values))


if __name__ == "__main__":
    main()
