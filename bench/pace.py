"""Open-loop load at a fixed rate, for latency percentiles at a given load (wrk has no rate limit).

    python bench/pace.py --base http://127.0.0.1:8000 --rate 150 --seconds 10 --mode lease --tokens T1,T2

Runs as its own process (bench_api.py starts it), on asyncio with plain keep-alive HTTP/1.1
connections: no threads and no third-party client, so it costs a few percent of a core at a few
hundred requests a second. Requests start on a fixed schedule, whatever the server's latency, and
each latency is measured from the moment the request was due, not from when it was sent, so a slow
server cannot hide its queueing by slowing the client down (no coordinated omission).

Modes: `get` starts GETs of `--path` at `--rate` per second; `lease` starts `--rate / 2` round trips
per second, each a POST leases/ then, as soon as it answers, POST leases/{id}/release/ (`--rate`
requests per second in all). Prints one JSON object: requests, failures, achieved rate, p50/p90/p99/max ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Coroutine
from typing import Any
from urllib.parse import urlparse


class Connection:
    """One keep-alive HTTP/1.1 connection; answers must carry Content-Length (Django's do)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self.reader, self.writer, self.host = reader, writer, host

    async def request(self, method: str, path: str, token: str, body: bytes = b"") -> tuple[int, bytes]:
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Token {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        self.writer.write(head.encode() + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("server closed the connection")
        status = int(status_line.split()[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)


class Pacer:
    def __init__(self, base: str, tokens: list[str], max_connections: int) -> None:
        url = urlparse(base)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.tokens = tokens
        self.idle: list[Connection] = []
        self.open = 0
        self.max_connections = max_connections
        self.latencies: list[float] = []
        self.failures: dict[str, int] = {}
        self.turn = 0

    async def _connection(self) -> Connection:
        if self.idle:
            return self.idle.pop()
        while self.open >= self.max_connections:  # a cap keeps a stalled server from eating sockets
            await asyncio.sleep(0.001)
            if self.idle:
                return self.idle.pop()
        self.open += 1
        reader, writer = await asyncio.open_connection(self.host, self.port)
        return Connection(reader, writer, f"{self.host}:{self.port}")

    def _fail(self, why: str) -> None:
        self.failures[why] = self.failures.get(why, 0) + 1

    async def call(self, due: float, method: str, path: str, token: str, body: bytes = b"") -> bytes | None:
        """One request due at `due` (loop time); records its latency from `due`."""
        conn = await self._connection()
        try:
            status, payload = await conn.request(method, path, token, body)
        except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
            self.open -= 1
            conn.writer.close()
            self._fail(type(exc).__name__)
            return None
        self.idle.append(conn)
        self.latencies.append(asyncio.get_running_loop().time() - due)
        if status >= 400:
            self._fail(str(status))
            return None
        return payload

    async def round_trip(self, due: float, token: str, body: bytes) -> None:
        created = await self.call(due, "POST", "/api/v1/leases/", token, body)
        if created is not None:
            lease_id = json.loads(created)["id"]
            await self.call(asyncio.get_running_loop().time(), "POST", f"/api/v1/leases/{lease_id}/release/",
                            token, b"{}")

    async def run(self, mode: str, rate: float, seconds: float, path: str, body: bytes) -> float:
        loop = asyncio.get_running_loop()
        interval = 1.0 / (rate / 2 if mode == "lease" else rate)
        start = loop.time() + 0.05
        tasks: list[asyncio.Task[object]] = []
        n = 0
        while True:
            due = start + n * interval
            if due - start >= seconds:
                break
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            token = self.tokens[n % len(self.tokens)]
            coro: Coroutine[Any, Any, object] = (self.round_trip(due, token, body) if mode == "lease"
                                                 else self.call(due, "GET", path, token))
            tasks.append(asyncio.ensure_future(coro))
            n += 1
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=seconds + 60)
        return loop.time() - start


def _pct(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--tokens", required=True, help="comma-separated API tokens, used in turn")
    parser.add_argument("--mode", choices=["get", "lease"], default="get")
    parser.add_argument("--path", default="/healthz")
    parser.add_argument("--rate", type=float, default=150.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--body", default='{"pool": "bench", "gpus": 1}')
    parser.add_argument("--max-connections", type=int, default=256)
    args = parser.parse_args()
    pacer = Pacer(args.base, args.tokens.split(","), args.max_connections)
    cpu0 = time.process_time()
    elapsed = asyncio.run(pacer.run(args.mode, args.rate, args.seconds, args.path, args.body.encode()))
    ordered = sorted(pacer.latencies)
    print(json.dumps({
        "requests": len(ordered), "failures": pacer.failures, "rate": len(ordered) / elapsed if elapsed else 0.0,
        "p50_ms": _pct(ordered, 0.50), "p90_ms": _pct(ordered, 0.90), "p99_ms": _pct(ordered, 0.99),
        "max_ms": ordered[-1] * 1000 if ordered else float("nan"), "connections": pacer.open,
        "client_cpu_s": time.process_time() - cpu0}))


if __name__ == "__main__":
    main()
