"""Trace replay at scale, fair policy against the FIFO baseline on the same input.

    .venv/bin/python bench/bench_simulate.py [--jobs 100000] [--trace DIR | --no-alibaba] [--table]

1. A synthetic trace (`examples/traces/generate.py`, seed 1) of `--jobs` jobs on the fleet of
   `examples/traces/sim.yaml` (224 GPUs, three teams): replay time (target < 60 s for 100,000
   jobs), utilisation, mean wait and Jain's index, fair as a ratio to FIFO.
2. The real Alibaba GPU trace (cluster-trace-gpu-v2023, kept outside the repository; `--trace DIR`
   or `GPUPOOL_TRACE` names the folder of its openb CSVs, see the README): its node list is the
   fleet (1,213 hosts, 6,212 GPUs), its pods the jobs; then the same jobs on 1/N of the nodes
   (`--alibaba-shrink`), where they contend. Skipped, saying so, when no folder is given.
Wall time is what a user waits; CPU time is shown too, since a shared machine inflates wall time.
`--table` prints only the README's table of the Alibaba trace, fair against FIFO, as Markdown
rows (the single source of those figures: rerun it and paste the rows when the policy changes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "traces"))

from generate import generate  # noqa: E402

from allocation.policy.replay import Job  # noqa: E402
from allocation.simulation.replay import (  # noqa: E402
    SimConfig,
    convert_alibaba,
    load_sim_config,
    sim_config_from_dict,
    simulate,
)

CAUSES = ("priority", "reclaim", "fair_share")


def _run(jobs: list[Job], cfg: SimConfig, policy: str) -> tuple[dict[str, Any], float]:
    cpu = time.process_time()
    out = simulate(jobs, cfg.gpus, cfg.teams, cfg.quotas, cfg.priority_classes, cfg.half_life_s,
                   policy, pools=cfg.pools)
    return out, time.process_time() - cpu


def _ratio(a: float, b: float) -> str:
    return f"{a / b:5.2f}x" if b else "  n/a"


def compare(title: str, jobs: list[Job], cfg: SimConfig) -> None:
    print(f"\n== {title}: {len(jobs):,} jobs on {len(cfg.gpus):,} GPUs")
    fifo, fifo_cpu = _run(jobs, cfg, "fifo")
    fair, fair_cpu = _run(jobs, cfg, "fair")
    rows = [
        ("replay wall s", fair["wall_s"], fifo["wall_s"]),
        ("replay CPU s", round(fair_cpu, 2), round(fifo_cpu, 2)),
        ("utilization", fair["utilization"], fifo["utilization"]),
        ("mean wait s", fair["wait_s"]["mean"], fifo["wait_s"]["mean"]),
        ("p95 wait s", fair["wait_s"]["p95"], fifo["wait_s"]["p95"]),
        ("mean JCT s", fair["jct_s"]["mean"], fifo["jct_s"]["mean"]),
        ("Jain index", fair["jain_index"], fifo["jain_index"]),
        ("Jain backlogged", fair["jain_index_backlogged"], fifo["jain_index_backlogged"]),
    ]
    print(f"{'':16s}{'fair':>14s}{'fifo':>14s}{'fair/fifo':>11s}")
    for name, a, b in rows:
        print(f"{name:16s}{a:14,.4g}{b:14,.4g}{_ratio(a, b):>11s}")
    causes = ", ".join(f"{c} {fair['preemptions_by_cause'][c]:,}" for c in CAUSES)
    print(f"fair: preemptions {fair['preemptions']:,} ({causes}), quota violations "
          f"{fair['quota_violations']}, unplaceable {fair['unplaceable']}; "
          f"fifo: quota violations {fifo['quota_violations']}, unplaceable {fifo['unplaceable']}")
    for team, fig in fair["teams"].items():
        base = fifo["teams"][team]
        print(f"  {team:10s} entitled {fig['entitled_share']:.3f}  achieved fair "
              f"{fig['achieved_share']:.3f} / fifo {base['achieved_share']:.3f}")


def shipped_trace(folder: Path, shrink: int) -> list[tuple[str, list[Job], SimConfig]]:
    """The Alibaba openb trace on its whole node list, then on 1/`shrink` of the nodes of each
    (model, size) group (groups that round to no node are left out): on its own 6,212 GPUs the
    trace hardly contends (about 16 GPUs busy on average), so that the policies have work to do.
    Raises FileNotFoundError, naming them, when the two CSVs are not both in `folder`."""
    pods, nodes = folder / "openb_pod_list_default.csv", folder / "openb_node_list_gpu_node.csv"
    if not pods.exists() or not nodes.exists():
        raise FileNotFoundError(f"{pods.name} and {nodes.name} are not both in {folder}")
    jobs, config = convert_alibaba(pods, nodes)
    scaled = dict(config)
    scaled["sources"] = [{**src, "hosts": round(src["hosts"] / shrink)}
                         for src in config["sources"] if round(src["hosts"] / shrink) > 0]
    scaled["quotas"] = []  # the whole fleet's guarantees would not fit on the small one
    return [("the whole node list", jobs, sim_config_from_dict(config)),
            (f"1/{shrink} of the nodes", jobs, sim_config_from_dict(scaled))]


TABLE_HEAD = ("| Alibaba openb on | policy | jobs | GPUs | makespan h | utilization | "
              "wait mean / p95 s | Jain | Jain backlogged (backlogged h) | "
              "preemptions: priority / reclaim / fair share |\n" + "|---" * 10 + "|")


def table_row(fleet: str, policy: str, cfg: SimConfig, out: dict[str, Any]) -> str:
    """One Markdown row of the README's table for one replay's metrics."""
    by_cause = " / ".join(f"{out['preemptions_by_cause'][c]:,}" for c in CAUSES)
    return (f"| {fleet} | {policy} | {out['jobs']:,} | {len(cfg.gpus):,} | "
            f"{out['makespan_s'] / 3600:,.1f} | "
            f"{out['utilization']:.4f} | {out['wait_s']['mean']:,.0f} / {out['wait_s']['p95']:,.0f} | "
            f"{out['jain_index']:.4f} | {out['jain_index_backlogged']:.4f} "
            f"({out['backlogged_s'] / 3600:,.1f}) | {by_cause} |")


def with_fair_share_preemption(cfg: SimConfig) -> SimConfig:
    """The same config with fair-share preemption on in every pool (the default interval)."""
    return replace(cfg, pools={name: replace(view, fair_share_preemption=True)
                               for name, view in cfg.pools.items()})


def print_table(folder: Path, shrink: int) -> None:
    print(TABLE_HEAD)
    for fleet, jobs, cfg in shipped_trace(folder, shrink):
        for label, policy, config in (("fair", "fair", cfg),
                                      ("fair + fair-share preemption", "fair", with_fair_share_preemption(cfg)),
                                      ("fifo", "fifo", cfg)):
            print(table_row(fleet, label, config, _run(jobs, config, policy)[0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="0: only the Alibaba trace")
    parser.add_argument("--trace", type=Path, default=os.environ.get("GPUPOOL_TRACE") or None,
                        help="folder of the Alibaba openb CSVs (default: $GPUPOOL_TRACE)")
    parser.add_argument("--no-alibaba", action="store_true")
    parser.add_argument("--alibaba-shrink", type=int, default=100,
                        help="also replay the Alibaba trace on 1/N of its nodes")
    parser.add_argument("--table", action="store_true",
                        help="print only the README's table rows for the Alibaba trace")
    args = parser.parse_args()
    if args.table:
        if args.trace is None:
            parser.error("--table needs the Alibaba trace: give --trace DIR or set GPUPOOL_TRACE")
        try:
            print_table(args.trace, args.alibaba_shrink)
        except FileNotFoundError as exc:
            parser.error(str(exc))
        return
    cfg = load_sim_config(ROOT / "examples" / "traces" / "sim.yaml")
    if args.jobs > 0:
        rows = generate(args.jobs, seed=1, capacity=len(cfg.gpus))
        jobs = [Job(i, float(r[0]), r[1], r[2], float(r[3]), r[4], r[5])
                for i, r in enumerate(rows)]
        compare("synthetic trace (seed 1)", jobs, cfg)
    if args.no_alibaba:
        return
    if args.trace is None:
        print("\n(skipped the Alibaba trace: give --trace DIR or set GPUPOOL_TRACE; see the README)")
        return
    try:
        fleets = shipped_trace(args.trace, args.alibaba_shrink)
    except FileNotFoundError as exc:
        print(f"\n(skipped the Alibaba trace: {exc})")
        return
    for fleet, ali_jobs, ali_cfg in fleets:
        compare(f"Alibaba cluster-trace-gpu-v2023 (openb), {fleet}", ali_jobs, ali_cfg)


if __name__ == "__main__":
    main()
