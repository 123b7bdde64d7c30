"""Topology in the simulator: the Alibaba openb trace (read from its folder, never copied) on its
node list in racks of N hosts, replayed topology-aware and topology-blind in the same run
(`simulate --racks N`); prints the share of multi-host gangs placed within one rack (of all, and
of those for which a rack had room when they started) and the fragmentation (largest free rack,
racks wholly free), each with the blind replay's figure and their ratio.

    .venv/bin/python bench/bench_topology_sim.py --trace ../shared/traces [--racks 8] [--gpu-scale 4]
        [--shrink 10]

openb has no job larger than one 8-GPU node: `--gpu-scale K` asks K times the GPUs of every job
(K=4: the 8-GPU pods become 32-GPU gangs over 4 hosts). `--shrink S` keeps 1/S of the nodes of each
(model, size) group so that the fleet contends (on the whole list about 16 GPUs are busy on average).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from allocation.simulation.replay import convert_alibaba, sim_config_from_dict, simulate
from allocation.simulation.topology import compare, scale_jobs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", default=os.environ.get("GPUPOOL_TRACE", ""))
    parser.add_argument("--racks", type=int, default=8)
    parser.add_argument("--gpu-scale", type=int, default=4)
    parser.add_argument("--shrink", type=int, default=10)
    parser.add_argument("--policy", default="fair")
    args = parser.parse_args()
    if not args.trace:
        print("no trace folder (--trace DIR or GPUPOOL_TRACE): skipped")
        return
    folder = Path(args.trace)
    jobs, config = convert_alibaba(folder / "openb_pod_list_default.csv", folder / "openb_node_list_gpu_node.csv")
    if args.shrink > 1:
        config = {**config, "quotas": [], "sources": [
            {**src, "hosts": round(src["hosts"] / args.shrink)} for src in config["sources"]
            if round(src["hosts"] / args.shrink) > 0]}
    cfg = sim_config_from_dict(config)
    jobs = scale_jobs(jobs, args.gpu_scale)

    def run(rack_size: int, topology_aware: bool) -> dict:
        return simulate(jobs, cfg.gpus, cfg.teams, cfg.quotas, cfg.priority_classes, cfg.half_life_s,
                        args.policy, pools=cfg.pools, gpu_sources=cfg.gpu_sources, rack_size=rack_size,
                        topology_aware=topology_aware)

    out = compare(run, args.racks)
    topo = out["topology"]
    aware, blind = topo["aware"], topo["blind"]
    print(f"openb: {len(jobs):,} jobs (GPUs x{args.gpu_scale}) on {len(cfg.gpus):,} GPUs (1/{args.shrink} of "
          f"the nodes), racks of {args.racks} hosts ({aware['racks']} racks), policy {args.policy}")
    for key in ("share_in_one_rack", "share_in_one_rack_where_possible"):
        a, b = aware[key], blind[key]
        ratio = f"{a / b:.2f}x" if a is not None and b else "n/a"
        print(f"  {key}: aware {a} / blind {b} ({ratio}); gangs {aware['gangs']} / {blind['gangs']}, "
              f"a rack had room for {aware['gangs_one_rack_possible']} / {blind['gangs_one_rack_possible']}")
    la, lb = aware["largest_free_rack_gpus"]["mean"], blind["largest_free_rack_gpus"]["mean"]
    print(f"  largest free rack, GPUs (time mean): aware {la} / blind {lb} ({la / lb:.2f}x)" if lb else
          f"  largest free rack: aware {la} / blind {lb}")
    print(f"  racks wholly free (time mean): aware {aware['whole_free_racks_mean']} / blind "
          f"{blind['whole_free_racks_mean']}")
    print(f"  utilization aware {out['utilization']} / blind {topo['blind_utilization']}; mean wait aware "
          f"{out['wait_s']['mean']} s / blind {topo['blind_wait_s']['mean']} s; wall aware {out['wall_s']} s / "
          f"blind {topo['blind_wall_s']} s")
    print(json.dumps(topo))


if __name__ == "__main__":
    main()
