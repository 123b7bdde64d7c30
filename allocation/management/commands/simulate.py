"""`manage.py simulate --trace FILE.csv --config FILE.yaml [--policy fifo]`: replay a job trace
through the allocation policy on a simulated clock and print one JSON object (CONTRACT.md).
Thin: reading, replaying and measuring live in `allocation.simulation`."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from allocation.config import ConfigError
from allocation.simulation import TraceError, load_sim_config, load_trace, simulate


class Command(BaseCommand):
    help = "Replay a job trace through the allocation policy; print the metrics as JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--trace", required=True,
                            help="CSV: submit_s,team,gpus,duration_s[,priority_class,model,util_pct]")
        parser.add_argument("--config", required=True,
                            help="YAML config; its `simulated` sources are the fleet")
        parser.add_argument("--policy", default="fair", choices=["fair", "fifo"])
        parser.add_argument("--restart", action="store_true",
                            help="preempted jobs start over instead of resuming")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            cfg = load_sim_config(opts["config"])
            jobs = load_trace(opts["trace"])
            if not cfg.gpus:
                raise CommandError(f"{opts['config']}: no `simulated` source, so no fleet to "
                                   "replay on")
            result = simulate(jobs, cfg.gpus, cfg.teams, cfg.quotas, cfg.priority_classes,
                              cfg.half_life_s, opts["policy"], restart=opts["restart"],
                              pools=cfg.pools)
        except ConfigError as exc:
            raise CommandError("invalid config:\n" + "\n".join(exc.errors)) from None
        except (TraceError, OSError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(json.dumps(result))
