"""Dashboard pages at fleet scale: server time per page with 2,000 hosts, 16,000 GPUs (all held),
10,000 pending leases and 100,000 audit events, logged in as a pool admin (who sees everything).

    .venv/bin/python bench/bench_dashboard.py [--hosts 2000] [--pending 10000] [--repeat 5]
        [--db NAME] [--reuse] [--only SUBSTRING] [--profile PATH]

The fleet's partial updates are measured too (`measure_fleet_updates`): what a 5 s poll costs and
carries when nothing changed and when one host did, against the whole page the poll used to fetch.

`--reuse` keeps the database a previous run built (of the same sizes) instead of building it
again; `--profile PATH` prints the 25 costliest functions of one request to PATH (cProfile).

Each page is rendered in this process through Django's test client (the server's work: queries,
templates; no network, no browser), median of `--repeat` after one warm-up. The target is
≤ 300 ms a page; `/healthz` is the baseline measured in the same run.

The role homes (`/teams/`, `/pools/`, a team's page) are measured as the admin, and the overview and
teams list again as a member of team-0, whose overview is the team's page (400 leases held, 1,000
waiting). The history pages (pool, team, GPU, and their JSON) read a day of 1-minute points and 90 days of
hourly points for the pool, its teams and its model, and 90 days of hourly telemetry for 100 GPUs
(bench/history_seed.py); the minute's recording (`history_record`, the beat task's work) is timed
on the same fleet.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _django

HISTORY_PAGES = ["/pools/bench/", "/pools/bench/?range=90d", "/teams/team-0/", "/teams/team-0/?range=90d",
                 "/gpus/{gpu}/?range=1h", "/gpus/{gpu}/?range=90d", "/api/v1/history/pools/bench?range=24h",
                 "/api/v1/history/teams/team-0?range=90d"]
# Every list page: its first page, a deep page, and filters that touch every row.
PAGES = ["/healthz", "/", "/quotas/", "/fleet/", "/fleet/?page=20", "/fleet/?state=free&sort=free",
         "/fleet/?q=node-1", "/fleet/table/", "/fleet/table/?page=10", "/fleet/heatmap/", "/fleet/heatmap.json",
         "/fleet/heatmap.json?group=source", "/fleet/hosts/{host}/",
         "/queue/", "/queue/?page=150", "/queue/?team=team-3&sort=size&q=bench",
         "/leases/", "/leases/?state=granted&page=60", "/leases/?model=h100&sort=team",
         "/audit/", "/audit/?page=300", "/audit/?kind=lease&window=24h&q=granted",
         "/capacity/", "/teams/", "/pools/", "/teams/team-0/?range=1h"]
# As a member of team-0 (400 leases held, 1,000 waiting): the overview is the team's page.
MEMBER_PAGES = ["/", "/teams/"]


def build(hosts: int, pending: int) -> None:
    """The fleet, all of it granted (4-GPU leases), then `pending` requests that must wait."""
    from django.contrib.auth import get_user_model

    from allocation.config import parse_config
    from allocation.config.apply import config_apply
    from allocation.engine import run_pass
    from allocation.models import Lease, PriorityClass, Team
    from inventory.discovery import source_discover
    from inventory.models import Pool, Source

    teams = [f"team-{i}" for i in range(10)]
    config_apply(parse_config(f"""
pools: [{{name: bench}}]
teams: [{", ".join(f"{{name: {t}, weight: {1 + i % 3}}}" for i, t in enumerate(teams))}]
quotas: [{", ".join(f"{{team: {t}, pool: bench, guaranteed: 800, limit: null}}" for t in teams)}]
priority_classes: [{{name: default, value: 0}}]
sources: [{{name: sim, kind: simulated, pool: bench, hosts: {hosts}, gpus_per_host: 8}}]
"""))
    source_discover(source=Source.objects.get(name="sim"))
    pool, user = Pool.objects.get(name="bench"), get_user_model().objects.create(username="bench")
    rows, default = {t.name: t for t in Team.objects.all()}, PriorityClass.objects.get(name="default")

    def add(n: int, gpus: int) -> None:
        Lease.objects.bulk_create([Lease(team=rows[teams[i % len(teams)]], user=user, pool=pool,
                                         priority_class=default, gpu_count=gpus, ttl_seconds=86400)
                                   for i in range(n)])

    add(hosts * 2, 4)  # every GPU
    run_pass([pool.pk])
    add(pending, 4)  # they wait, each with a reason and a position
    run_pass([pool.pk])
    held = Lease.objects.filter(state="granted").count()
    waiting = Lease.objects.filter(state="pending").count()
    assert (held, waiting) == (hosts * 2, pending), (held, waiting)


def audit_history(events: int) -> None:
    """Up to `events` audit events over the last 30 days, as months of leases leave behind (the
    build itself writes few: its leases are bulk-created)."""
    import random
    from datetime import timedelta

    from django.utils import timezone

    from allocation.models import AuditEvent, Lease

    missing = events - AuditEvent.objects.count()
    if missing <= 0:
        return
    rng, now = random.Random(15), timezone.now()
    leases = list(Lease.objects.values_list("pk", flat=True)[:5000])
    actions = ["lease.created", "lease.granted", "lease.released", "lease.expired", "lease.preempted"]
    AuditEvent.objects.bulk_create([AuditEvent(
        at=now - timedelta(seconds=rng.uniform(0, 30 * 86400)), actor=f"user-{i % 97}",
        action=rng.choice(actions), object_type="lease", object_id=str(lease), lease_id=lease,
        message=f"{rng.choice(['finished', 'idle', 'requeued', 'over quota'])} on node-{i % 2000}")
        for i, lease in ((i, rng.choice(leases)) for i in range(missing))], batch_size=5000)


def _built() -> bool:
    from inventory.models import Host

    return Host.objects.exists()


def profile(path: str, only: str) -> None:
    """One request per page under cProfile, the costliest functions (cumulative) written to `path`."""
    import cProfile
    import io
    import pstats

    from django.contrib.auth import get_user_model
    from django.test import Client

    admin, _ = get_user_model().objects.get_or_create(username="admin", defaults={"is_staff": True})
    client = Client()
    client.force_login(admin)
    with open(path, "w") as out:
        for page in PAGES:
            if only and only not in page:
                continue
            client.get(page)
            profiler = cProfile.Profile()
            profiler.runcall(client.get, page)
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
            out.write(f"==== {page}\n{text.getvalue()}\n")


def build_history() -> str:
    """History for the fleet built; returns the UUID of a GPU that has 90 days of it."""
    from bench.history_seed import seed_history
    from inventory.models import Gpu

    uuids = list(Gpu.objects.order_by("pk").values_list("uuid", flat=True)[:100])
    seed_history(gpu_uuids=uuids)
    return uuids[0]


def measure_record(repeat: int) -> float:
    """Median seconds of one minute's recording (each run a new minute, so each one writes)."""
    from datetime import timedelta

    from django.utils import timezone

    from history.services import history_record

    now = timezone.now()
    times = []
    for i in range(repeat):
        start = time.perf_counter()
        history_record(now=now + timedelta(minutes=i + 1))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_gpu_hour() -> tuple[float, int]:
    """Seconds to roll one hour of every GPU's minute samples (60 a GPU) up into hourly points, the
    heaviest tick of the hour; with the points made."""
    from datetime import timedelta

    from django.db import connection
    from django.utils import timezone

    from history.models import GpuPoint
    from history.services import floor, gpu_history_roll_up

    now = timezone.now()
    hour = floor(now, 3600) - timedelta(hours=1)
    with connection.cursor() as cur:
        cur.execute("INSERT INTO inventory_gpusample (gpu_id, at, utilization_pct, memory_used_mb, temperature_c,"
                    " power_w) SELECT g.id, %s + m * interval '1 minute', random() * 100, 1000, 50, 300"
                    " FROM inventory_gpu g CROSS JOIN generate_series(0, 59) m", [hour])
    GpuPoint.objects.filter(at__gte=hour).delete()
    start = time.perf_counter()
    gpu_history_roll_up(now=now)
    return time.perf_counter() - start, GpuPoint.objects.filter(at=hour).count()


def _host_id() -> int:
    from inventory.models import Host

    host = Host.objects.order_by("name").values_list("pk", flat=True).first()
    assert host is not None
    return host


def _timed(repeat: int, call: Any) -> tuple[float, Any]:
    """Median seconds of `call()` over `repeat` runs after a warm-up, and its last answer."""
    call()
    times, answer = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        answer = call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), answer


def measure_fleet_updates(repeat: int) -> list[tuple[str, float, int]]:
    """(what, median seconds, bytes sent) for the fleet's live updates: the whole page and its live
    part (what every 5 s poll fetched before), the version poll of the cards and of the table with
    nothing changed (204) and after one host's cordon (its card or row, out of band), and the
    heatmap's payload (raw and gzipped), its 304 and its diff after the cordon."""
    import re

    from django.contrib.auth import get_user_model
    from django.test import Client

    from allocation.services.admin import host_admin_action
    from inventory.models import Host

    admin, _ = get_user_model().objects.get_or_create(username="admin", defaults={"is_staff": True})
    client = Client()
    client.force_login(admin)
    htmx: dict[str, Any] = {"HTTP_HX_REQUEST": "true"}
    out = []

    def size(response: Any) -> int:
        return len(response.content) if response.status_code != 304 else 0

    def poll(path: str, version: str) -> Any:
        return client.get(f"{path}?v={version}", HTTP_HX_TARGET="fleet-poll", **htmx)

    for path in ("/fleet/", "/fleet/table/"):
        seconds, page = _timed(repeat, lambda p=path: client.get(p))
        out.append((f"{path} (whole page)", seconds, size(page)))
        seconds, live = _timed(repeat, lambda p=path: client.get(p, HTTP_HX_TARGET="fleet-live", **htmx))
        out.append((f"{path} live part (the old 5 s poll)", seconds, size(live)))
        found = re.search(r'id="fleet-version" name="v" value="(\w+)"', page.content.decode())
        assert found, path
        version = found.group(1)
        seconds, same = _timed(repeat, lambda p=path, v=version: poll(p, v))
        assert same.status_code == 204, same.status_code
        out.append((f"{path} poll, nothing changed (204)", seconds, size(same)))
        first = Host.objects.order_by("name").first()
        assert first is not None
        host_admin_action(host=first, verb="cordon" if not first.admin_state else "uncordon", actor="bench")
        seconds, diff = _timed(repeat, lambda p=path, v=version: poll(p, v))
        out.append((f"{path} poll, one host changed (OOB)", seconds, size(diff)))

    gz: dict[str, Any] = {"HTTP_ACCEPT_ENCODING": "gzip"}
    seconds, full = _timed(repeat, lambda: client.get("/fleet/heatmap.json"))
    body = full.json()
    out.append(("/fleet/heatmap.json (raw)", seconds, size(full)))
    seconds, zipped = _timed(repeat, lambda: client.get("/fleet/heatmap.json", **gz))
    out.append(("/fleet/heatmap.json (gzip)", seconds, size(zipped)))
    seconds, same = _timed(repeat, lambda: client.get(f"/fleet/heatmap.json?since={body['version']}", **gz))
    assert same.status_code == 304, same.status_code
    out.append(("/fleet/heatmap.json?since= nothing changed (304)", seconds, 0))
    host = Host.objects.order_by("name").last()
    assert host is not None
    host_admin_action(host=host, verb="cordon" if not host.admin_state else "uncordon", actor="bench")
    seconds, diff = _timed(repeat, lambda: client.get(f"/fleet/heatmap.json?since={body['version']}", **gz))
    assert diff.status_code == 200, diff.status_code
    out.append(("/fleet/heatmap.json?since= one host changed", seconds, size(diff)))
    return out


def _member() -> Any:
    """A member of team-0 only (not an admin)."""
    from django.contrib.auth import get_user_model

    from allocation.models import Team

    member, _ = get_user_model().objects.get_or_create(username="member")
    Team.objects.get(name="team-0").members.add(member)
    return member


def measure(repeat: int, pages: list[str], only: str = "", user: Any = None) -> dict[str, float]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    if user is None:
        user, _ = get_user_model().objects.get_or_create(username="admin", defaults={"is_staff": True})
    client = Client()
    client.force_login(user)
    out = {}
    for path in pages:
        if only and only not in path and path != "/healthz":
            continue
        client.get(path)  # warm-up: templates compiled, caches filled
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            response = client.get(path)
            times.append(time.perf_counter() - start)
            assert response.status_code == 200, (path, response.status_code)
        out[path] = statistics.median(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--events", type=int, default=100_000, help="audit events in the log")
    parser.add_argument("--db", default="gpupool_bench_dashboard", help="PostgreSQL database to (re)create")
    parser.add_argument("--reuse", action="store_true", help="keep a database an earlier run built")
    parser.add_argument("--only", default="", help="measure only the pages whose path contains this")
    parser.add_argument("--profile", default="", help="write a cProfile summary of one request per page here")
    args = parser.parse_args()
    vendor = _django.setup(args.db, fresh=not args.reuse)
    started = time.perf_counter()
    if not (args.reuse and _built()):
        build(args.hosts, args.pending)
    audit_history(args.events)
    print(f"fleet: {args.hosts} hosts, {args.hosts * 8} GPUs, {args.pending} pending, "
          f"{args.events} audit events on {vendor} "
          f"(built in {time.perf_counter() - started:.0f} s)")
    if args.profile:
        profile(args.profile, args.only)
    history = not args.only or any(args.only in page for page in HISTORY_PAGES)
    gpu = build_history() if history else ""  # 90 days of points: only for the pages that read them
    host = _host_id()
    times = measure(args.repeat, [page.format(host=host) for page in PAGES]
                    + ([page.format(gpu=gpu) for page in HISTORY_PAGES] if history else []), args.only)
    member = measure(args.repeat, MEMBER_PAGES, args.only, user=_member())
    times.update({f"{path} (member of team-0)": seconds for path, seconds in member.items()})
    base = times["/healthz"]
    for path, seconds in times.items():
        verdict = "" if path == "/healthz" else ("  ok" if seconds <= 0.3 else "  OVER 300 ms")
        print(f"{path:44s} {seconds * 1000:8.1f} ms  ({seconds / base:6.0f}x healthz){verdict}")
    if not args.only or "fleet" in args.only:
        cards = times.get("/fleet/") or base  # the card page measured above: the fleet's own baseline
        print("fleet updates (median, bytes sent; ratio to the /fleet/ card page above)")
        for label, seconds, size in measure_fleet_updates(args.repeat):
            print(f"{label:52s} {seconds * 1000:8.1f} ms  ({seconds / cards:5.2f}x /fleet/)  {size:>9,} bytes"
                  f"{'  ok' if seconds <= 0.3 else '  OVER 300 ms'}")
    if args.only:
        return  # the minute's recording and the hourly roll-up are timed on a full run
    record = measure_record(args.repeat)
    print(f"{'history_record (one minute)':44s} {record * 1000:8.1f} ms  ({record / base:6.0f}x healthz)")
    seconds, points = measure_gpu_hour()
    print(f"{'per-GPU hour roll-up (60 samples a GPU)':44s} {seconds * 1000:8.1f} ms  "
          f"({seconds / base:6.0f}x healthz), {points} GPU points")

if __name__ == "__main__":
    main()
