"""The shape of a lease benchmark over time: how busy the machine was, how much of the pools'
capacity leases held, how long the queues were and how fast leases were granted, per interval.

A run's totals hide its phases: in bench_kueue_baseline the machine is CPU-bound while the
clients submit (creates take the cores and the GPUs sit free between a release and the next
pass), GPU-bound while the large and medium leases run, and CPU-bound again while thousands of
small leases are granted and released. Which phase is long says what to work on.

    sampler = CpuSampler(); sampler.start(); ...run...; sampler.stop()
    print_timeline(database_url, sampler.samples, capacity_gpus=600)
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable

Sample = tuple[float, float]  # (epoch seconds, fraction of the machine's CPU busy since the last one)
# (epoch seconds, cores used since the last sample by each named group of processes)
GroupSample = tuple[float, dict[str, float]]


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


class CpuSampler(threading.Thread):
    """Samples the machine's CPU use every `interval` seconds until stopped (a daemon thread of
    the driver, which does little else meanwhile: the clients are processes of their own).
    `groups`, when given, returns the CPU seconds spent so far by each named group of processes
    (web, scheduler, PostgreSQL, clients): sampled alike, so each phase says who took the cores."""

    def __init__(self, interval: float = 1.0, groups: Callable[[], dict[str, float]] | None = None) -> None:
        super().__init__(daemon=True)
        self.interval, self._stop_event, self._groups = interval, threading.Event(), groups
        self.samples: list[Sample] = []
        self.group_samples: list[GroupSample] = []

    def run(self) -> None:
        busy0, total0 = _cpu_times()
        last = self._groups() if self._groups else {}
        at0 = time.time()
        while not self._stop_event.wait(self.interval):
            busy, total = _cpu_times()
            now = time.time()
            self.samples.append((now, (busy - busy0) / max(1, total - total0)))
            busy0, total0 = busy, total
            if self._groups:
                spent = self._groups()
                # max(0): a group's exited processes leave the tree with their CPU (the clients at the end)
                self.group_samples.append((now, {k: max(0.0, v - last.get(k, 0.0)) / max(1e-6, now - at0)
                                                 for k, v in spent.items()}))
                last = spent
            at0 = now

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


def _spread(buckets: list[float], start: float, end: float, weight: float, width: float) -> None:
    """Add `weight` × the seconds of [start, end) that fall in each bucket of `width` seconds."""
    b = int(start // width)
    while start < end and b < len(buckets):
        step = min(end, (b + 1) * width)
        buckets[b] += (step - start) * weight
        start, b = step, b + 1


def print_timeline(database_url: str, samples: list[Sample], *, capacity_gpus: int, width: float = 10.0,
                   group_samples: list[GroupSample] | None = None) -> None:
    """Per `width` seconds from the first lease's creation: the machine's CPU busy, the share of
    the capacity held by leases (by lease size), the mean pending leases and the grants a
    second (by size); then, given `group_samples`, the cores each group of processes used."""
    import psycopg2

    conn = psycopg2.connect(database_url)
    with conn.cursor() as cur:
        cur.execute("SELECT extract(epoch FROM min(created_at)) FROM allocation_lease")
        row = cur.fetchone()
        if row is None or row[0] is None:
            return
        t0 = float(row[0])
        cur.execute("SELECT gpu_count, extract(epoch FROM created_at), extract(epoch FROM granted_at), "
                    "extract(epoch FROM ended_at) FROM allocation_lease "
                    "WHERE granted_at IS NOT NULL AND ended_at IS NOT NULL")
        rows = [(int(g), float(c) - t0, float(a) - t0, float(e) - t0) for g, c, a, e in cur.fetchall()]
    conn.close()
    if not rows:
        return
    sizes = sorted({g for g, *_ in rows})
    n = int(max(e for *_, e in rows) // width) + 1
    held: dict[int, list[float]] = defaultdict(lambda: [0.0] * n)
    waiting: dict[int, list[float]] = defaultdict(lambda: [0.0] * n)
    grants: dict[int, list[float]] = defaultdict(lambda: [0.0] * n)
    for gpus, created, granted, ended in rows:
        _spread(held[gpus], granted, ended, gpus, width)
        _spread(waiting[gpus], created, granted, 1.0, width)
        if granted >= 0 and int(granted // width) < n:
            grants[gpus][int(granted // width)] += 1
    cpu: list[list[float]] = [[] for _ in range(n)]
    for at, busy in samples:
        if 0 <= at - t0 < n * width:
            cpu[int((at - t0) // width)].append(busy)
    label = "/".join(str(g) for g in sizes)
    print(f"over time ({width:.0f} s from the first lease; by lease size {label} GPUs): machine CPU busy, "
          "capacity held, mean pending leases, grants/s")
    for b in range(n):
        cpu_text = f"{100 * sum(cpu[b]) / len(cpu[b]):3.0f}%" if cpu[b] else "   -"
        shares = [100 * held[g][b] / (capacity_gpus * width) for g in sizes]
        print(f"  {b * width:5.0f} s  CPU {cpu_text}  held {sum(shares):3.0f}% ("
              + " + ".join(f"{s:2.0f}" for s in shares) + ")  pending "
              + " / ".join(f"{waiting[g][b] / width:5.0f}" for g in sizes) + "  grants/s "
              + " / ".join(f"{grants[g][b] / width:5.1f}" for g in sizes))
    if group_samples:
        _print_groups(group_samples, t0, n, width)


def _print_groups(group_samples: list[GroupSample], t0: float, n: int, width: float) -> None:
    names = list(group_samples[0][1])
    cores: list[dict[str, list[float]]] = [defaultdict(list) for _ in range(n)]
    for at, used in group_samples:
        if 0 <= at - t0 < n * width:
            for name, value in used.items():
                cores[int((at - t0) // width)][name].append(value)
    print("cores used by each group of processes, same intervals: " + ", ".join(names))
    for b in range(n):
        print(f"  {b * width:5.0f} s  " + "  ".join(
            f"{name} {sum(cores[b][name]) / len(cores[b][name]) if cores[b][name] else 0.0:4.2f}" for name in names))

