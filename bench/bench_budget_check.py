"""What a GPU-hour budget costs on the lease-create path, in process, on PostgreSQL.

    python bench/bench_budget_check.py [--rounds 1000]

Creates a fresh database (`--db`, on DATABASE_URL's server), a pool of 80 simulated GPUs and two
teams: `free` without a budget and `capped` with a `block_new` budget that never runs out, so each
of its requests pays the budget check (an indexed query for the team's budgets and the pure
judgement). Then `--rounds` times, alternating which team goes first, one `lease_create` for each
team, timed alone, and its `lease_release`. Prints the median and p90 of each (the first 10%
left out as warm-up) and the capped team's figures as a ratio of the free team's: the baseline of
the same run. Also the SQL queries of one create of each. Drops the database at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _stack

CONFIG = """
pools: [{name: bench}]
teams: [{name: free, members: [free0]}, {name: capped, members: [capped0]}]
priority_classes: [{name: default, value: 0}]
sources: [{name: sim, kind: simulated, pool: bench, hosts: 10, gpus_per_host: 8}]
budgets: [{team: capped, gpu_hours: 1000000000, period: month, action: block_new}]
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--db", default="gpupool_bench_budget")
    args, _ = parser.parse_known_args()
    url = _stack.fresh_database(args.db)
    os.environ.update({"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "pool.settings", "GPUPOOL_AUTOSCHEDULE": "0",
                       "GPUPOOL_VAR_DIR": tempfile.mkdtemp(prefix="gpupool-bench-budget-"), "LOG_LEVEL": "ERROR",
                       "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15"), "DEBUG": "0"})
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection, connections
    from django.test.utils import CaptureQueriesContext

    from allocation.config import parse_config
    from allocation.config.apply import config_apply
    from allocation.services.leases import lease_create, lease_release
    from inventory.models import Pool

    try:
        call_command("migrate", verbosity=0)
        config_apply(parse_config(CONFIG, "bench.yaml"))
        call_command("discover", verbosity=0, stdout=open(os.devnull, "w"))  # noqa: SIM115
        pool = Pool.objects.get(name="bench")
        users = {name: get_user_model().objects.get(username=f"{name}0") for name in ("free", "capped")}
        times: dict[str, list[float]] = {"free": [], "capped": []}
        queries: dict[str, int] = {}
        for i in range(args.rounds):
            for name in ("free", "capped") if i % 2 else ("capped", "free"):
                started = time.perf_counter()
                lease, _ = lease_create(user=users[name], pool=pool, gpus=1)
                times[name].append(time.perf_counter() - started)
                lease_release(lease=lease, actor="bench")
        for name, user in users.items():  # counted apart: capturing slows every query down
            with CaptureQueriesContext(connection) as ctx:
                lease, _ = lease_create(user=user, pool=pool, gpus=1)
            queries[name] = len(ctx.captured_queries)
        skip = args.rounds // 10
        stats = {name: (statistics.median(ts[skip:]) * 1000, sorted(ts[skip:])[int(len(ts[skip:]) * 0.9)] * 1000)
                 for name, ts in times.items()}
        print(f"lease_create, {args.rounds - skip} timed each, PostgreSQL, in process (no HTTP)")
        for name, (p50, p90) in stats.items():
            label = "team with a budget" if name == "capped" else "team without (baseline)"
            print(f"  {label:<26} median {p50:.3f} ms ({p50 / stats['free'][0]:.2f}×), "
                  f"p90 {p90:.3f} ms ({p90 / stats['free'][1]:.2f}×), {queries[name]} queries")
    finally:
        connections.close_all()
        _stack.drop_database(url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
