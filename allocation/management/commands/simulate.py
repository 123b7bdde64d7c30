"""`manage.py simulate --trace FILE.csv --config FILE.yaml [--policy fifo]`, and
`manage.py simulate --fleet live --pool P [--config FILE.yaml] TRACE.csv`: replay a job trace
through the allocation policy on a simulated clock and print one JSON object (CONTRACT.md).
Thin: reading, replaying and measuring live in `allocation.simulation.replay`, the live fleet in
`allocation.simulation.live`."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from allocation.config import ConfigError
from allocation.simulation.live import LiveFleetError, live_fleet
from allocation.simulation.replay import TraceError, load_sim_config, load_trace, simulate
from allocation.simulation.topology import compare, scale_jobs


class Command(BaseCommand):
    help = ("Replay a job trace through the allocation policy, on a config's simulated fleet or on a "
            "pool's live inventory (--fleet live --pool P); print the metrics as JSON.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("trace_file", nargs="?", metavar="TRACE",
                            help="the trace, as an alternative to --trace")
        parser.add_argument("--trace", help="CSV: submit_s,team,gpus,duration_s"
                                            "[,priority_class,model,util_pct,binding,source]")
        parser.add_argument("--config", help="YAML config: its `simulated` sources are the fleet "
                                             "(--fleet config); with --fleet live, its teams, quotas and "
                                             "priority classes replace the database's")
        parser.add_argument("--fleet", default="config", choices=["config", "live"],
                            help="live: the current inventory of --pool (every GPU in service, free at t=0)")
        parser.add_argument("--pool", help="the pool whose live inventory is the fleet (--fleet live)")
        parser.add_argument("--policy", default="fair", choices=["fair", "fifo"])
        parser.add_argument("--restart", action="store_true",
                            help="preempted jobs start over instead of resuming")
        parser.add_argument("--racks", type=int, default=0, metavar="N",
                            help="hosts in racks of N: replay topology-aware and topology-blind in one run "
                                 "and report gangs within one rack and fragmentation for both")
        parser.add_argument("--gpu-scale", type=int, default=1, metavar="K",
                            help="every job asks for K times its GPUs (multi-host gangs from a trace of "
                                 "single-node jobs)")

    def handle(self, *args: Any, **opts: Any) -> None:
        trace = _trace_path(opts)
        live = opts["fleet"] == "live"
        if live and not opts["pool"]:
            raise CommandError("--fleet live needs --pool NAME: the pool whose inventory to replay on")
        if not live and opts["pool"]:
            raise CommandError("--pool names a live pool: use it with --fleet live")
        if not live and not opts["config"]:
            raise CommandError("--config FILE.yaml is required (its `simulated` sources are the fleet), "
                               "or --fleet live --pool NAME")
        try:
            fleet = None
            if live:
                found = live_fleet(opts["pool"], load_sim_config(opts["config"]) if opts["config"] else None)
                cfg, fleet = found.config, found.fleet
            else:
                cfg = load_sim_config(opts["config"])
            jobs = scale_jobs(load_trace(trace), opts["gpu_scale"])
            if not cfg.gpus:
                raise CommandError(f"{opts['config']}: no `simulated` source, so no fleet to "
                                   "replay on")
            run = partial(simulate, jobs, cfg.gpus, cfg.teams, cfg.quotas, cfg.priority_classes,
                          cfg.half_life_s, opts["policy"], restart=opts["restart"],
                          pools=cfg.pools, gpu_sources=cfg.gpu_sources, parents=cfg.parents)
            result = compare(run, opts["racks"]) if opts["racks"] > 0 else run()
        except ConfigError as exc:
            raise CommandError("invalid config:\n" + "\n".join(exc.errors)) from None
        except (TraceError, LiveFleetError, OSError) as exc:
            raise CommandError(str(exc)) from None
        if fleet is not None:
            result["fleet"] = fleet
        self.stdout.write(json.dumps(result))


def _trace_path(opts: dict[str, Any]) -> str:
    """The trace, given as `--trace FILE` (the original form) or positionally (the contract's
    `simulate --fleet live --pool P TRACE`); both at once only if they agree."""
    flag, positional = opts.get("trace"), opts.get("trace_file")
    if flag and positional and flag != positional:
        raise CommandError(f"two traces given ({positional} and --trace {flag}): name one")
    path = flag or positional
    if not path:
        raise CommandError("a trace is required: TRACE.csv or --trace TRACE.csv")
    return str(path)
