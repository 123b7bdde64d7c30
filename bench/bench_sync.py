"""Inventory sync of a large Kubernetes fleet into the database: first sync and no-change resync.

    python bench/bench_sync.py [--nodes 2000]

Baseline measured in the same run: the time to parse the Node objects into facts (the work the
sync cannot avoid), so the figures read as "sync costs N× parsing".
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=2000)
    args = parser.parse_args()
    vendor = _django.setup("gpupool_bench_sync")
    # The fleet: 2,000 nodes × 8 whole GPUs = 16,000 GPUs; then a mixed fleet of the same
    # node count whose MIG and time-sliced nodes expand to 35,200 schedulable devices.
    run(args.nodes, vendor, plain=True)
    run(args.nodes, vendor, plain=False)


def run(n_nodes: int, vendor: str, *, plain: bool) -> None:

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.base import Discovery
    from agents.k8s_nodes import node_to_host
    from bench.k8s_fleet import make_nodes, make_pods
    from inventory.models import Gpu, Pool, Source
    from inventory.sync import sync_source

    if plain:  # only the whole-GPU kinds of the generator (H100, A100, L40S)
        nodes = [n for i, n in enumerate(make_nodes(n_nodes * 2, gpus_per_node=8)) if i % 5 < 3][:n_nodes]
    else:
        nodes = make_nodes(n_nodes, gpus_per_node=8)
    pods = make_pods(nodes)
    by_node: dict[str, list] = {}
    for pod in pods:
        by_node.setdefault(pod["spec"].get("nodeName", ""), []).append(pod)
    t0 = time.perf_counter()
    facts = tuple(node_to_host(n, by_node.get(n["metadata"]["name"], [])) for n in nodes)
    parse_s = time.perf_counter() - t0
    gpus = sum(len(h.gpus) for h in facts)

    Gpu.objects.all().delete()
    pool, _ = Pool.objects.get_or_create(name="bench")
    source, _ = Source.objects.update_or_create(name="k8s-plain" if plain else "k8s-mixed",
                                               defaults={"kind": "kubernetes", "pool": pool})
    results = {}
    # A realistic resync: every GPU reports new telemetry (utilisation, memory, temperature).
    import dataclasses

    busy = tuple(dataclasses.replace(h, gpus=tuple(dataclasses.replace(
        g, utilization_pct=float(i % 100), memory_used_mb=i, temperature_c=40.0 + i % 30)
        for i, g in enumerate(h.gpus))) for h in facts)
    for label, fleet in (("first sync", facts), ("no-change resync", facts),
                         ("no-change resync (2)", facts), ("telemetry resync", busy)):
        with CaptureQueriesContext(connection) as queries:
            t0 = time.perf_counter()
            report = sync_source(source, Discovery(hosts=fleet))
            results[label] = (time.perf_counter() - t0, len(queries), report)
    print(f"\n{'plain' if plain else 'mixed'} fleet: {len(facts)} nodes, {gpus} GPUs (incl. MIG slices) on {vendor}; "
          f"rows now: {Gpu.objects.count()} GPUs")
    print(f"baseline: parsing {len(nodes)} Node objects into facts: {parse_s:.3f} s")
    for label, (seconds, nq, report) in results.items():
        print(f"{label:>22}: {seconds:6.3f} s  ({seconds / parse_s:5.1f}× parsing)  {nq:4d} SQL queries  "
              f"created={report.created} updated={report.updated} gone={report.gone}")
    first, resync = results["first sync"][0], results["no-change resync"][0]
    print(f"goals (16,000-GPU fleet): first sync < 10 s: {'met' if first < 10 else 'MISSED'}; "
          f"no-change resync < 2 s: {'met' if resync < 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
