"""What the queue caps and the shared rate limit cost on the lease-create path, in process, on
PostgreSQL and Redis, against the same run's baselines.

    python bench/bench_lease_create.py [--rounds 600] [--depth 0 --depth 999] [--db NAME] [--batch 500]

Creates a fresh database (`--db`, on DATABASE_URL's server; dropped at the end) with two pools
of 80 simulated GPUs: `open` (queue_caps null: nothing counted, nothing locked; the create path
as it was) and `capped` (the default caps: 1,000 pending leases per team). Before each phase the
team's queue in both pools is filled to `--depth` pending leases, and every timed create is
released (cancelled, untimed) at once, so the queue stays at that depth. The variants of one
round run one after the other, their order alternating, `--rounds` times; medians and p90 of
the last 90%:
  1. `lease_create` (the service: resolve, admission, the INSERT) in `open` vs in `capped`: the
     cap's cost is the lock ahead of the INSERT and the count of the team's queue inside it;
  2. the rate check alone: DRF's UserRateThrottle on the Redis cache (the limit as it was: a
     get and a set, not atomic across processes) vs the token bucket script (core.ratelimit);
  3. POST /api/v1/leases/ through DRF in process (token auth, validation, JSON; no HTTP): the old
     way (`open`, cache throttle) vs the new (`capped`, token bucket);
  4. with `--batch N`: N leases by one POST /api/v1/leases/batch/ vs N single POSTs, per lease.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _stack

CONFIG = """
pools: [{name: open, queue_caps: {pending_leases_per_team: null}}, {name: capped}]
teams: [{name: t, members: [u0]}]
priority_classes: [{name: default, value: 0}]
sources:
  - {name: a, kind: simulated, pool: open, hosts: 10, gpus_per_host: 8, host_prefix: open}
  - {name: b, kind: simulated, pool: capped, hosts: 10, gpus_per_host: 8, host_prefix: capped}
"""


def _stats(times: list[float]) -> tuple[float, float]:
    kept = sorted(times[len(times) // 10:])
    return statistics.median(kept) * 1e6, kept[int(len(kept) * 0.9)] * 1e6


def _report(title: str, times: dict[str, list[float]], baseline: str) -> None:
    print(title)
    base = _stats(times[baseline])
    for name, ts in times.items():
        p50, p90 = _stats(ts)
        print(f"  {name:<44} median {p50:8.1f} µs ({p50 / base[0]:.2f}×)  p90 {p90:8.1f} µs ({p90 / base[1]:.2f}×)")


def _rounds(n: int, variants: dict[str, Callable[[], Any]],
            after: Callable[[], Any] = lambda: None) -> dict[str, list[float]]:
    """Each variant `n` times, their order alternating round by round; `after` (untimed) after each call."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for i in range(n):
        for name in names if i % 2 else names[::-1]:
            started = time.perf_counter()
            variants[name]()
            times[name].append(time.perf_counter() - started)
            after()
    return times


def _setup(args: argparse.Namespace) -> str:
    url = _stack.fresh_database(args.db)
    os.environ.update({"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "pool.settings", "GPUPOOL_AUTOSCHEDULE": "0",
                       "GPUPOOL_VAR_DIR": tempfile.mkdtemp(prefix="gpupool-bench-create-"), "LOG_LEVEL": "ERROR",
                       "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15"), "DEBUG": "0",
                       "GPUPOOL_LEASE_RATE": "1000000000/min"})
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from allocation.config import parse_config
    from allocation.config.apply import config_apply

    call_command("migrate", verbosity=0)
    if args.async_commit:
        with connection.cursor() as cur:
            cur.execute("SET synchronous_commit TO off")
    config_apply(parse_config(CONFIG, "bench.yaml"))
    call_command("discover", verbosity=0, stdout=open(os.devnull, "w"))  # noqa: SIM115
    return url


class Bench:
    """The team, its user, the two pools, and the leases a phase created (released after each)."""

    def __init__(self, rounds: int) -> None:
        from django.contrib.auth import get_user_model

        from allocation.models import PriorityClass, Team
        from inventory.models import Pool

        self.rounds = rounds
        self.pools = {p.name: p for p in Pool.objects.all()}
        self.user, self.team = get_user_model().objects.get(username="u0"), Team.objects.get(name="t")
        self.default = PriorityClass.objects.get(name="default")
        self.created: list[Any] = []

    def fill(self, depth: int) -> None:
        """The team's queue in each pool: `depth` pending leases, the table vacuumed and analyzed
        (as autovacuum keeps a live database)."""
        from django.db import connection

        from allocation.models import Lease

        Lease.objects.filter(team=self.team).delete()
        for pool in self.pools.values():
            Lease.objects.bulk_create([Lease(team=self.team, user=self.user, pool=pool, priority_class=self.default,
                                             gpu_count=1, ttl_seconds=600) for _ in range(depth)])
        with connection.cursor() as cur:
            cur.execute("VACUUM ANALYZE allocation_lease")

    def release_last(self) -> None:
        from allocation.services.leases import lease_release

        lease_release(lease=self.created.pop(), actor="bench")

    def service(self, depth: int) -> None:
        from allocation.services.leases import lease_create

        def create_in(pool: str) -> Callable[[], None]:
            return lambda: self.created.append(lease_create(user=self.user, pool=self.pools[pool], gpus=1)[0].pk)

        variants = {BASE_SERVICE: create_in("open"), "in pool capped (lock + count of the queue)": create_in("capped")}
        self.fill(depth)
        _rounds(50, variants, self.release_last)  # warm: connections, prepared statements, the capacity cache
        _report(f"1. lease_create, the team's queue at {depth} pending:",
                _rounds(self.rounds, variants, self.release_last), BASE_SERVICE)

    def rate_check(self) -> None:
        from django.test import RequestFactory
        from rest_framework.request import Request

        from allocation.api.throttles import LeaseCreateThrottle

        request = Request(RequestFactory().post("/api/v1/leases/"))
        request.user = self.user
        old, new, view = CacheThrottle(), LeaseCreateThrottle(), cast(Any, None)  # a throttle reads no view
        _report("2. the per-user rate check alone:", _rounds(self.rounds * 5, {
            BASE_RATE: lambda: old.allow_request(request, view),
            "token bucket (one Lua script)": lambda: new.allow_request(request, view),
        }), BASE_RATE)

    def api(self, depth: int) -> None:
        from rest_framework.test import APIClient

        from allocation.api.leases import LeaseViewSet
        from core.tokens import token_issue

        self.fill(depth)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token_issue(user=self.user, name='bench', scope='write')}")
        now = LeaseViewSet.get_throttles
        views = cast(Any, LeaseViewSet)

        def post(pool: str, throttles: Callable[[Any], Any]) -> Callable[[], None]:
            def call() -> None:
                views.get_throttles = throttles
                response = client.post("/api/v1/leases/", {"pool": pool, "gpus": 1}, format="json")
                assert response.status_code == 201, response.content
                self.created.append(response.json()["id"])
            return call

        try:
            times = _rounds(self.rounds, {BASE_API: post("open", lambda view: [CacheThrottle()]),
                                          "capped + token bucket (now)": post("capped", now)}, self.release_last)
        finally:
            views.get_throttles = now
        _report(f"3. POST /api/v1/leases/ through DRF, the team's queue at {depth} pending:", times, BASE_API)


    def batch(self, size: int) -> None:
        """POST /api/v1/leases/batch/ of `size` items vs `size` single POSTs, through DRF in process:
        the time per lease. The queue is emptied (untimed) before each call."""
        from rest_framework.test import APIClient

        from allocation.models import Lease
        from core.tokens import token_issue

        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token_issue(user=self.user, name='batch', scope='write')}")
        body = {"pool": "capped", "gpus": 1}

        def singles() -> None:
            for _ in range(size):
                assert client.post("/api/v1/leases/", body, format="json").status_code == 201

        def batch() -> None:
            answer = client.post("/api/v1/leases/batch/", {"leases": [body] * size}, format="json")
            assert answer.status_code == 200 and answer.json()["created"] == size, answer.content[:300]

        def empty() -> None:
            Lease.objects.filter(team=self.team).delete()

        rounds = max(3, self.rounds // size)
        times = _rounds(rounds, {BASE_SINGLES: singles, f"one POST leases/batch/ of {size}": batch}, empty)
        per_lease = {name: [t / size for t in ts] for name, ts in times.items()}
        _report(f"4. {size} leases, per lease, through DRF ({rounds} rounds):", per_lease, BASE_SINGLES)


BASE_SERVICE = "in pool open (no caps: as before)"
BASE_SINGLES = "single POST leases/ (one call a lease)"
BASE_RATE = "cache throttle (get + set; as before)"
BASE_API = "open + cache throttle (as before)"


def CacheThrottle() -> Any:
    """The limit as it was (allocation/api/leases.py before core.ratelimit): DRF's
    UserRateThrottle on the cache."""
    from rest_framework.settings import api_settings
    from rest_framework.throttling import UserRateThrottle

    class Old(UserRateThrottle):
        scope = "lease_create"

        def get_rate(self) -> str | None:
            rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
            return None if rate is None else str(rate)

    return Old()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--depth", type=int, action="append", help="pending leases of the team (repeatable)")
    parser.add_argument("--db", default="gpupool_bench_lease_create")
    parser.add_argument("--async-commit", action="store_true",
                        help="synchronous_commit off in this session: each commit's WAL flush (milliseconds on a "
                             "busy disk, the same with and without caps) out of the figures")
    parser.add_argument("--batch", type=int, default=0, metavar="N",
                        help="also time N leases made by one POST leases/batch/ against N single POSTs")
    args, _ = parser.parse_known_args()
    depths = args.depth or [0, 999]
    url = _setup(args)
    from django.db import connections

    try:
        bench = Bench(args.rounds)
        print(f"lease create path, {args.rounds} rounds a phase (medians of the last 90%), PostgreSQL + Redis, "
              f"in process{', synchronous_commit off' if args.async_commit else ''}")
        for depth in depths:
            bench.service(depth)
        bench.rate_check()
        bench.api(depths[-1])
        if args.batch:
            bench.batch(args.batch)
    finally:
        connections.close_all()
        _stack.drop_database(url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
