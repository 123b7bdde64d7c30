"""Large leases among churning small ones: Kueue's baseline scenario in the simulator (the pure
policy, no server), with and without the reservation for a waiting large lease (backfill.py's
priority blocks), in the same run.

    python bench/bench_large_leases.py [--pools 1] [--scale 1.0] [--declared]

One cohort of Kueue's scenario per pool (bench_kueue_baseline.py: 6 teams, guaranteed 20, limit
120, 120 GPUs as 15 hosts × 8; per team 350 small 1-GPU leases of 200 ms every 100 ms at priority
50, 100 medium 5-GPU of 500 ms every 500 ms at 100, 50 large 20-GPU of 1 s every 1.2 s at 200;
`same_host: false`). Leases declare no duration, as the live benchmark's clients (`--declared`:
they do, and backfill may use it). Passes run at every event, instantly: the waits are the
policy's alone, not the server's. Prints the mean and p99 time to grant per class, the makespan
and the preemptions, for both policies, and the ratio of the large leases' mean wait.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from allocation.policy import blocks, get_policy
from allocation.policy.measures import percentile
from allocation.policy.replay import Job, Replay
from allocation.policy.types import Grant, PriorityClassView, QuotaView
from tests.policy.factories import fleet

CLASSES = {  # name: (count per team, creation interval s, run time s, priority, GPUs)
    "small": (350, 0.1, 0.2, 50, 1),
    "medium": (100, 0.5, 0.5, 100, 5),
    "large": (50, 1.2, 1.0, 200, 20),
}
TEAMS = 6


class _Timed(Replay):
    """A replay that remembers each job's first grant."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.first_grant: dict[int, float] = {}

    def _start(self, grant: Grant, t: float) -> None:
        self.first_grant.setdefault(self.job_of[grant.lease_id].index, t)
        super()._start(grant, t)


def scenario(pools: int, scale: float) -> tuple[list[Job], dict[int, str]]:
    jobs: list[Job] = []
    for p in range(pools):
        for t in range(TEAMS):
            for cls, (count, every, run_s, _, gpus) in CLASSES.items():
                for i in range(max(1, int(count * scale))):
                    jobs.append(Job(0, i * every, f"c{p}-q{t}", gpus, run_s, cls))
    jobs.sort(key=lambda j: (j.submit_s, j.team, j.priority_class))
    jobs = [Job(i, j.submit_s, j.team, j.gpus, j.duration_s, j.priority_class) for i, j in enumerate(jobs)]
    return jobs, {j.index: j.priority_class for j in jobs}


def replay(jobs: list[Job], pools: int, declared: bool, use_blocks: bool,
           preemptible: bool = True) -> tuple[dict[str, Any], dict[int, float]]:
    gpus = tuple(g for p in range(pools) for g in fleet(15, pool=f"cohort-{p}", prefix=f"c{p}-node",
                                                         start_id=1 + p * 120))
    teams = {f"c{p}-q{t}": 1.0 for p in range(pools) for t in range(TEAMS)}
    quotas = {(f"c{p}-q{t}", f"cohort-{p}"): QuotaView(f"c{p}-q{t}", f"cohort-{p}", 20, 120)
              for p in range(pools) for t in range(TEAMS)}
    classes = {name: PriorityClassView(name, prio, preemptible, 0, 0) for name, (_, _, _, prio, _) in CLASSES.items()}
    placement = {j.index: (f"cohort-{j.team[1:j.team.index('-')]}", False) for j in jobs}
    extras = {} if declared else {j.index: {"expected_duration_s": None} for j in jobs}
    saved = blocks.ENABLED
    blocks.ENABLED = use_blocks
    try:
        run = _Timed(jobs, gpus, teams, quotas, classes, 168 * 3600.0, get_policy("fair"), placement,
                     extras=extras)
        return run.run(), run.first_grant
    finally:
        blocks.ENABLED = saved


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pools", type=int, default=1)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--declared", action="store_true", help="leases declare their run time")
    parser.add_argument("--no-preemption", action="store_true",
                        help="no lease is preemptible: a large lease can only wait for free GPUs")
    args = parser.parse_args()
    jobs, cls_of = scenario(args.pools, args.scale)
    print(f"{len(jobs)} jobs on {args.pools} pool(s) of 120 GPUs; durations "
          f"{'declared' if args.declared else 'not declared'}; "
          f"{'nothing' if args.no_preemption else 'every lease'} preemptible")
    means = {}
    for label, use_blocks in (("without priority blocks", False), ("with priority blocks", True)):
        started = time.perf_counter()
        result, first = replay(jobs, args.pools, args.declared, use_blocks, not args.no_preemption)
        waits: dict[str, list[float]] = {c: [] for c in CLASSES}
        for job in jobs:
            if job.index in first:
                waits[cls_of[job.index]].append(first[job.index] - job.submit_s)
        line = "  ".join(f"{c} mean {sum(w) / len(w):6.2f} s p99 {percentile(sorted(w), 0.99):6.2f} s"
                         for c, w in waits.items() if w)
        means[use_blocks] = sum(waits["large"]) / len(waits["large"])
        print(f"{label:<24} {line}  makespan {result['makespan_s']:.1f} s, utilisation "
              f"{result['utilization']:.3f}, preemptions {result['preemptions']}  "
              f"({time.perf_counter() - started:.1f} s to replay)")
    print(f"large leases' mean time to grant, with / without: {means[True] / max(means[False], 1e-9):.2f}×")


if __name__ == "__main__":
    main()
