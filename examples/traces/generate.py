"""Deterministic synthetic job traces for `manage.py simulate` and the benchmarks.

    python examples/traces/generate.py --jobs 500 --seed 7 --load 1.5 --period_s 7200 \
        --out examples/traces/small.csv      # the committed example: short, contended

Arrivals are Poisson at a rate that offers `--load` x the fleet's capacity on average; each
team's share of arrivals swings around its base share on a `--period_s` cycle (teams out of
phase), so teams take turns at being the heavy user and queues build and drain. Sizes are 1/2/4/8
GPUs (50/25/15/10%); durations are log-normal (median 10 min, sigma 1.5: heavy-tailed, capped
at 2 days); 10% of jobs are high priority, 25% best-effort; most jobs take any GPU, some ask for
H100 or A100|H100.
The same arguments always give the same trace.
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import sys
from collections.abc import Sequence
from typing import TextIO

SIZES = ((1, 0.50), (2, 0.25), (4, 0.15), (8, 0.10))
CLASSES = (("high", 0.10), ("default", 0.65), ("best-effort", 0.25))
MODELS = (("", 0.75), ("H100", 0.15), ("A100|H100", 0.10))
MEDIAN_S, SIGMA, CAP_S = 600.0, 1.5, 2 * 86400.0


def _pick(rng: random.Random, table: Sequence[tuple[object, float]]) -> object:
    x = rng.random() * sum(w for _, w in table)
    for value, weight in table:
        x -= weight
        if x <= 0:
            return value
    return table[-1][0]


def generate(jobs: int, seed: int = 1, teams: Sequence[tuple[str, float]] = (
        ("vision", 0.5), ("nlp", 0.3), ("research", 0.2)), capacity: int = 224,
        load: float = 0.8, period_s: float = 86400.0) -> list[tuple[int, str, int, int, str, str]]:
    """Rows (submit_s, team, gpus, duration_s, priority_class, model), sorted by submit_s."""
    rng = random.Random(seed)
    mean_size = sum(s * w for s, w in SIZES) / sum(w for _, w in SIZES)
    mean_duration = MEDIAN_S * math.exp(SIGMA ** 2 / 2)
    rate = load * capacity / (mean_size * mean_duration)  # jobs per second
    rows = []
    t = 0.0
    for _ in range(jobs):
        t += rng.expovariate(rate)
        swing = [(name, share * (1 + 0.9 * math.sin(2 * math.pi * (t / period_s + i / len(teams)))))
                 for i, (name, share) in enumerate(teams)]
        duration = min(CAP_S, rng.lognormvariate(math.log(MEDIAN_S), SIGMA))
        rows.append((int(t), str(_pick(rng, swing)), int(_pick(rng, SIZES)),  # type: ignore[call-overload]
                     max(1, int(duration)), str(_pick(rng, CLASSES)), str(_pick(rng, MODELS))))
    return rows


def write(rows: Sequence[tuple[int, str, int, int, str, str]], out: TextIO) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("submit_s", "team", "gpus", "duration_s", "priority_class", "model"))
    writer.writerows(rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--capacity", type=int, default=224, help="GPUs of the fleet (sim.yaml: 224)")
    parser.add_argument("--load", type=float, default=0.8, help="offered load / capacity")
    parser.add_argument("--period_s", type=float, default=86400.0)
    parser.add_argument("--out", type=argparse.FileType("w"), default=sys.stdout)
    args = parser.parse_args(argv)
    write(generate(args.jobs, args.seed, capacity=args.capacity, load=args.load,
                   period_s=args.period_s), args.out)


if __name__ == "__main__":
    main()
