"""Event fan-out: the web process's CPU per lease change with 10 open event streams against 1,000,
in the same run (allocation/watch/rendered.py: each change rendered once per process; a stream
filters on the change's ids before anything is rendered).

    python bench/bench_watch_fanout.py [--changes 400] [--rate 40] [--streams 1000] [--db NAME]

A fresh database (`--db`, on DATABASE_URL's server; dropped at the end), one web process as
`make run` starts it (gunicorn + one uvicorn worker, so that every stream is in the process
measured), and two processes of its own: the stream clients (asyncio, raw HTTP/1.1; each counts
the `event: lease` frames it gets) and the load generator (lease create + release through the
services, `--rate` changes a second, `--changes` in all; its commits publish through the outbox to
the Redis stream the web process's feed reads). Phases, each with the same load:
  A. 10 streams of a member of the team whose leases change (each sees every change);
  B. those 10 and `--streams` − 10 streams of a member of another team (they see none);
  C. `--streams` streams that each see every change (the cost per delivered frame, for scale).
The web process's CPU (user + system, /proc, its tree) is read before the load and once every
watching stream has all the changes; the idle rate measured before each phase (over IDLE_S, one
heartbeat period of the streams: their keep-alives are the cost of being open, not of a change)
is taken off.
The figure: CPU per change, and B/A (the claim: ≤ 1, up to noise: 990 streams that may not see a
change cost a comparison each, not a read or a render).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _stack

CONFIG = """
pools: [{name: p, queue_caps: {pending_leases_per_team: null, pending_gpus_per_team: null}}]
teams: [{name: watched, members: [watcher]}, {name: other, members: [bystander]}]
priority_classes: [{name: default, value: 0}]
sources:
  - {name: s, kind: simulated, pool: p, hosts: 4, gpus_per_host: 8}
"""

# The idle rate is measured over one heartbeat period of the streams (allocation.watch.handlers
# HEARTBEAT_S, 15 s) and a bit: each open stream's keep-alive is a cost of its being open, which a
# shorter window would miss here and then charge to the changes of the load.
IDLE_S = 16.0

LOAD = """
import sys, time
import django
django.setup()
from django.contrib.auth import get_user_model
from allocation.services.leases import lease_create, lease_release
changes, rate = int(sys.argv[1]), float(sys.argv[2])
user = get_user_model().objects.get(username="watcher")
start = time.monotonic()
for i in range(changes // 2):
    lease = lease_create(user=user, pool="p", gpus=1)[0]
    lease_release(lease=lease.pk, actor="bench")
    time.sleep(max(0.0, start + (i + 1) * 2 / rate - time.monotonic()))
print("done", flush=True)
"""


# --- the stream clients (a process of their own: `--client`) --------------------------------------

async def _stream(port: int, token: str, counts: list[int], index: int, ready: asyncio.Event,
                  opened: list[int], total: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    writer.write(f"GET /api/v1/leases/events/?timeout=3600 HTTP/1.1\r\nHost: bench\r\n"
                 f"Authorization: Token {token}\r\nAccept: text/event-stream\r\n\r\n".encode())
    await writer.drain()
    status = await reader.readline()
    if b" 200 " not in status:
        raise SystemExit(f"stream {index}: {status!r} {await reader.read(500)!r}")
    while True:
        line = await reader.readline()
        if not line:
            return
        if line == b"event: bookmark\n":
            opened[0] += 1
            if opened[0] == total:
                ready.set()
        elif line == b"event: lease\n":
            counts[index] += 1


async def _clients(port: int, tokens: list[str]) -> None:
    counts, opened, ready = [0] * len(tokens), [0], asyncio.Event()
    tasks = []
    for i, token in enumerate(tokens):
        tasks.append(asyncio.create_task(_stream(port, token, counts, i, ready, opened, len(tokens))))
        if i % 50 == 49:
            await asyncio.sleep(0.05)  # a ramp, not a SYN flood
    await ready.wait()
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    while True:  # one command a line on stdin: "count" prints the frames each stream has had
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if line.strip() != "count":
            break
        print(json.dumps(counts), flush=True)
    for task in tasks:
        task.cancel()


# --- the bench -----------------------------------------------------------------------------------

class Clients:
    def __init__(self, port: int, tokens: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--client", str(port), *tokens], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit("the stream clients did not get their bookmarks")

    def counts(self) -> list[int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        return list(json.loads(self.proc.stdout.readline()))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=30)


def _phase(name: str, web_pid: int, port: int, tokens: list[str], watching: int, args: argparse.Namespace,
           env: dict[str, str]) -> float:
    """CPU seconds of the web process per change, with these streams open; the first `watching`
    of them must get every change."""
    clients = Clients(port, tokens, env)
    try:
        time.sleep(2.0)
        idle_from, idle_cpu = time.monotonic(), _stack.cpu_seconds([web_pid])
        time.sleep(IDLE_S)
        idle_rate = (_stack.cpu_seconds([web_pid]) - idle_cpu) / (time.monotonic() - idle_from)
        before = clients.counts()
        started, cpu0 = time.monotonic(), _stack.cpu_seconds([web_pid])
        seconds = str(int(args.changes / args.rate))
        spy = subprocess.Popen(["py-spy", "record", "-p", str(_worker(web_pid)), "-d", seconds,
                                "-r", "200", "-f", "raw", "-o", f"{args.profile}-{name[0]}.txt"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if args.profile else None
        subprocess.run([sys.executable, "-c", LOAD, str(args.changes), str(args.rate)], env=env, check=True,
                       cwd=_stack.REPO, stdout=subprocess.DEVNULL, timeout=600)
        deadline = time.monotonic() + 120
        while True:
            got = [now - then for now, then in zip(clients.counts(), before, strict=True)]
            if min(got[:watching]) >= args.changes or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        elapsed, cpu = time.monotonic() - started, _stack.cpu_seconds([web_pid]) - cpu0
        if spy is not None:
            spy.wait(timeout=60)
    finally:
        clients.close()
    per_change = max(0.0, cpu - idle_rate * elapsed) / args.changes
    missing = sum(max(0, args.changes - g) for g in got[:watching])
    print(f"  {name:<58} {per_change * 1e3:7.3f} ms CPU/change  (idle {idle_rate * 1e3:.1f} ms/s taken off; "
          f"frames {sum(got):,}; missing {missing})", flush=True)
    return per_change


def _worker(pid: int) -> int:
    """The uvicorn worker under gunicorn's master `pid` (what py-spy samples)."""
    for path in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = path.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            return int(path.parent.name)
    return pid


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--client":
        asyncio.run(_clients(int(sys.argv[2]), sys.argv[3:]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=400)
    parser.add_argument("--rate", type=float, default=40.0, help="lease changes a second")
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--db", default="gpupool_bench_watch_fanout")
    parser.add_argument("--redis-db", type=int, default=14)
    parser.add_argument("--phases", default="ABC", help="which phases to run (A, B, C)")
    parser.add_argument("--profile", metavar="PREFIX", help="py-spy the web worker during each load: PREFIX-A.txt…")
    args = parser.parse_args()
    from stacktools.processes import Proc, answers, web_command
    from stacktools.processes import running as stack_running
    from stacktools.ready import free_port

    url = _stack.fresh_database(args.db)
    env = _stack.environment(url, args.redis_db, GPUPOOL_AUTOSCHEDULE="0", LOG_LEVEL="WARNING",
                             GPUPOOL_LEASE_RATE="1000000000/min")
    try:
        _stack.setup(env, CONFIG)
        keys = _stack.tokens(env, ["watcher", "bystander"])
        port = free_port()
        logs = Path(env["GPUPOOL_VAR_DIR"]) / "log"
        logs.mkdir(exist_ok=True)
        web = Proc("web", web_command(port, 1, "--log-level", "warning", "--backlog", "4096"), env,
                   logs / "web.log", answers(f"http://127.0.0.1:{port}/healthz"))
        with stack_running([web], timeout=60):
            print(f"event fan-out: {args.changes} lease changes at {args.rate:g}/s, one web process "
                  "(gunicorn + 1 uvicorn worker), CPU of its process tree per change")
            pid, figures = web.pid, {}
            phases = {
                "A": ("A. 10 streams, each sees every change", [keys["watcher"]] * 10, 10),
                "B": (f"B. the 10 + {args.streams - 10} streams of another team",
                      [keys["watcher"]] * 10 + [keys["bystander"]] * (args.streams - 10), 10),
                "C": (f"C. {args.streams} streams, each sees every change", [keys["watcher"]] * args.streams,
                      args.streams)}
            for phase in args.phases:
                title, tokens, watching = phases[phase]
                figures[phase] = _phase(title, pid, port, tokens, watching, args, env)
        if "A" in figures and "B" in figures:
            ratio = figures["B"] / figures["A"]
            print(f"B/A ({args.streams:,} open streams vs 10, the same 10 watching): {ratio:.2f}×")
        if "A" in figures and "C" in figures:
            print(f"C/A (every stream gets every frame): {figures['C'] / figures['A']:.1f}×, "
                  f"{(figures['C'] - figures['A']) / (args.streams - 10) * 1e6:.1f} µs per extra frame sent")
    finally:
        _stack.drop_database(url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
