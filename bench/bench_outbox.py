"""Concurrent lease writers and the outbox relay: what publishing each event after its commit costs.

    python bench/bench_outbox.py [--writers 8] [--writes 150] [--repeat 3]

Each writer (a thread with its own connection, as a web worker's request thread) commits one lease
event per transaction. Baseline, measured in the same run: the same writes with publishing left to
the periodic relay (the outbox rows only). Then with each writer publishing after its commit
(`allocation.outbox.relay_after_write`, what the service does). Prints writes/s of both, their
ratio, and how many rows were left unpublished when the writers finished (0: nothing waited for
the periodic relay). Needs Redis (REDIS_URL, default database 4 of 127.0.0.1:6379, flushed of the
stream's keys).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _django


def run(writers: int, writes: int, *, publish: bool) -> tuple[float, int]:
    import redis
    from django.conf import settings
    from django.db import connection, transaction

    import allocation.outbox as outbox
    from allocation.events import PUBLISHED, STREAM, LeaseChange
    from allocation.models import LeaseOutbox

    LeaseOutbox.objects.all().delete()
    redis.Redis.from_url(settings.REDIS_URL).delete(STREAM, PUBLISHED)
    real = outbox._publish_now
    outbox._publish_now = real if publish else (lambda: None)

    def writer(w: int) -> None:
        for n in range(writes):
            with transaction.atomic():
                outbox.announce([LeaseChange(f"00000000-0000-0000-0000-{w * 100_000 + n:012d}", 1, 1, "pending")])
        connection.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - began
    outbox._publish_now = real
    return writers * writes / seconds, LeaseOutbox.objects.filter(stream_id__isnull=True).count()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--writes", type=int, default=150, help="transactions per writer")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/4")
    _django.setup("gpupool_bench_outbox")
    base, published, left = [], [], []
    for _ in range(args.repeat):  # interleaved, so a busy moment of the machine hits both
        base.append(run(args.writers, args.writes, publish=False)[0])
        rate, unpublished = run(args.writers, args.writes, publish=True)
        published.append(rate)
        left.append(unpublished)
    b, p = statistics.median(base), statistics.median(published)
    print(f"{args.writers} writers × {args.writes} transactions, medians of {args.repeat}")
    print(f"outbox rows only (baseline)      {b:8.0f} writes/s")
    print(f"published after each commit      {p:8.0f} writes/s  ({p / b:.2f}× the baseline)")
    print(f"rows left for the periodic relay: {left} (per run)")


if __name__ == "__main__":
    main()
