"""What per-host backoff saves: one discovery round of an SSH source with healthy and dead hosts,
every host probed (what every round cost before the backoff) versus the dead ones backing off.

One real sshd on 127.0.0.1 (tests/support/sshd.py) serves the healthy hosts (8 x H100 with 56 MIG
devices through the fake nvidia-smi). Dead hosts are of two kinds: `refused` (the machine is up,
sshd is not: the port answers RST at once) and `silent` (it accepts TCP and never speaks SSH, a hung
machine: each costs `connect_timeout`, as a powered-off one behind a router does). Rounds are the
real `inventory.discovery.source_discover` (connector and reconcile, on PostgreSQL), run
back to back in one process: `all` with the backoff ignored (an admin's `manage.py discover`, and
every round before), `backoff` once the dead hosts are backing off (the beat's rounds).

    python bench/bench_discover_backoff.py [--healthy 1] [--dead 5] [--connect-timeout 10] [--rounds 3] [--sequential]

Prints one JSON object: median seconds per round for each kind of dead host (and, with
`--sequential`, with `max_parallel: 1` too: more dead hosts than parallel slots), and the ratio.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _django
from tests.support.sshd import FakeHost, SshServer, sshd_missing_reason, write_fleet


@contextmanager
def silent_ports(n: int) -> Iterator[list[int]]:
    """`n` ports that accept TCP connections and never answer."""
    servers, held, stop = [], [], threading.Event()
    for _ in range(n):
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        server.settimeout(0.1)
        servers.append(server)

    def accept() -> None:
        while not stop.is_set():
            for server in servers:
                try:
                    held.append(server.accept()[0])
                except OSError:
                    continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield [s.getsockname()[1] for s in servers]
    finally:
        stop.set()
        thread.join()
        for conn in [*held, *servers]:
            conn.close()


def refused_ports(n: int) -> list[int]:
    """`n` ports nobody listens on (bound for a moment to pick them, then closed)."""
    ports = []
    for _ in range(n):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            ports.append(probe.getsockname()[1])
    return ports


def measure(source: Any, *, dead: int, rounds: int) -> dict[str, Any]:
    """Median seconds of `rounds` rounds probing every host, then of `rounds` rounds with the dead
    hosts backing off (each has failed in the rounds before and waits)."""
    from inventory.discovery import source_discover

    def timed(skip: Any) -> tuple[float, Any]:
        started = time.perf_counter()
        report = source_discover(source=source, skip=skip)
        return time.perf_counter() - started, report

    timed(())  # warm-up: the first session's key exchange, the rows created
    every = [timed(()) for _ in range(rounds)]
    later = [timed(None) for _ in range(rounds)]
    assert all((r.hosts_failed, r.hosts_skipped) == (dead, 0) for _, r in every), every
    assert all((r.hosts_failed, r.hosts_skipped) == (0, dead) for _, r in later), later
    all_s, backoff_s = statistics.median(t for t, _ in every), statistics.median(t for t, _ in later)
    return {"all_s": round(all_s, 3), "backoff_s": round(backoff_s, 3), "ratio": round(all_s / backoff_s, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--healthy", type=int, default=1)
    parser.add_argument("--dead", type=int, default=5)
    parser.add_argument("--connect-timeout", type=float, default=10.0, help="the ssh default")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sequential", action="store_true", help="also max_parallel 1 (a minute or more)")
    parser.add_argument("--db", default="gpupool_bench_backoff")
    args = parser.parse_args()
    reason = sshd_missing_reason()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    vendor = _django.setup(args.db)
    from inventory.models import Pool, Source

    result: dict[str, Any] = {"healthy": args.healthy, "dead": args.dead, "connect_timeout_s": args.connect_timeout,
                              "rounds": args.rounds, "database": vendor}
    with (tempfile.TemporaryDirectory(prefix="bench-backoff-") as tmp, SshServer(Path(tmp) / "sshd") as server,
          silent_ports(args.dead) as silent):
        write_fleet(Path(tmp) / "fleets", "h100-mig")
        fake = FakeHost(Path(tmp) / "host", Path(tmp) / "fleets")
        fake.use("h100-mig")
        pool, _ = Pool.objects.get_or_create(name="bench-backoff")
        for kind, ports in (("refused", refused_ports(args.dead)), ("silent", silent)):
            for parallel in (16, 1) if args.sequential else (16,):
                Source.objects.filter(name="bench-backoff").delete()
                hosts = [server.host(f"ok-{i}") for i in range(args.healthy)]
                hosts += [server.host(f"dead-{i}", port=port) for i, port in enumerate(ports)]
                source = Source.objects.create(name="bench-backoff", kind="ssh", pool=pool, config={
                    "user": server.user, "key_file": str(server.client_key_file), "nvidia_smi": fake.command,
                    "hosts": hosts, "connect_timeout": args.connect_timeout, "command_timeout": 60,
                    "max_parallel": parallel})
                result[f"{kind}_parallel_{parallel}"] = measure(source, dead=args.dead, rounds=args.rounds)
        Source.objects.filter(name="bench-backoff").delete()
        pool.delete()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
