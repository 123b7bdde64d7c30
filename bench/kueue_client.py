"""The load generator of bench/bench_kueue_baseline.py: one process per pool (asyncio), submitting
its six teams' leases on Kueue's schedule, following their grants on the Server-Sent Events
stream (`leases/events/`), holding each lease for its run time, then releasing it. A preempted
lease is asked for again, as Kueue requeues. Writes its results as JSON for the driver.

    python bench/kueue_client.py --url URL --pool N --tokens JSON --out FILE [--scale 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path
from typing import Any

CLASSES = {  # name: (count per team, creation interval s, run time s, priority class, GPUs)
    "small": (350, 0.1, 0.2, "p50", 1),
    "medium": (100, 0.5, 0.5, "p100", 5),
    "large": (50, 1.2, 1.0, "p200", 20),
}
POOLS, TEAMS = 5, 6


def team_name(pool: int, team: int) -> str:
    return f"c{pool}-q{team}"


# --- the client ------------------------------------------------------------
class PoolClient:
    def __init__(self, url: str, pool: int, tokens: dict[str, str], scale: float) -> None:
        self.url, self.pool, self.tokens, self.scale = url + "/api/v1/", pool, tokens, scale
        self.jobs: list[dict[str, Any]] = []
        self.by_lease: dict[str, dict[str, Any]] = {}
        self.early: dict[str, str] = {}  # lease id → state seen on the stream before the POST answered
        self.last_event: dict[str, str] = {}  # team → id of the last event its stream sent
        self.errors: dict[str, int] = {}
        self.requests = 0
        self.done = asyncio.Event()
        self.remaining = 0

    def _error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    async def run(self) -> dict[str, Any]:
        import aiohttp

        # Idle connections are dropped before the server's keep-alive (5 s) would close them.
        connector = aiohttp.TCPConnector(limit=64, keepalive_timeout=3)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as http:
            self.http = http
            ready = [asyncio.Event() for _ in range(TEAMS)]
            streams = [asyncio.create_task(self.follow(team_name(self.pool, t), ready[t])) for t in range(TEAMS)]
            await asyncio.gather(*(r.wait() for r in ready))
            self.started = time.monotonic()
            gens = [asyncio.create_task(self.generate(team_name(self.pool, t), cls))
                    for t in range(TEAMS) for cls in CLASSES]
            self.remaining = sum(max(1, int(CLASSES[c][0] * self.scale)) for c in CLASSES) * TEAMS
            await asyncio.gather(*gens)
            await self.done.wait()
            self.finished = time.monotonic()
            for task in streams:
                task.cancel()
        return {"jobs": [{k: j[k] for k in ("class", "submit", "grant", "end", "preempted")} for j in self.jobs],
                "errors": self.errors, "requests": self.requests,
                "wall_s": self.finished - self.started}

    async def call(self, method: str, path: str, team: str, body: Any = None, key: str = "") -> dict[str, Any] | None:
        headers = {"Authorization": f"Token {self.tokens[team]}"}
        if key:
            headers["Idempotency-Key"] = key  # a retried POST returns the same lease
        for attempt in range(5):
            try:
                async with self.http.request(method, self.url + path, json=body, headers=headers) as r:
                    self.requests += 1
                    if r.status >= 400:
                        self._error(f"HTTP {r.status}")
                        if r.status >= 500 or r.status == 429:
                            await asyncio.sleep(0.2 * 2 ** attempt)
                            continue
                        return None
                    return await r.json()
            except Exception as exc:  # connection trouble: count it, back off, try again
                self._error(type(exc).__name__)
                await asyncio.sleep(0.2 * 2 ** attempt)
        return None

    async def generate(self, team: str, cls: str) -> None:
        count, interval = CLASSES[cls][:2]
        count = max(1, int(count * self.scale))
        for k in range(count):
            await asyncio.sleep(max(0.0, self.started + k * interval - time.monotonic()))
            job = {"team": team, "class": cls, "n": k, "submit": time.monotonic(), "grant": None, "end": None,
                   "preempted": 0}
            self.jobs.append(job)
            await self.submit(job)

    async def submit(self, job: dict[str, Any]) -> None:
        _, _, _, priority, gpus = CLASSES[job["class"]]
        job["attempt"] = job.get("attempt", 0) + 1
        lease = await self.call("POST", "leases/", job["team"], {
            "pool": f"cohort-{self.pool}", "gpus": gpus, "team": job["team"], "priority_class": priority,
            "same_host": False, "ttl_seconds": 600}, key=f"{job['team']}-{job['class']}-{job['n']}-{job['attempt']}")
        if lease is None:
            self.finish(job)
            return
        job["current"], job["held"] = lease["id"], False
        self.by_lease[lease["id"]] = job
        await self.on_state(lease["id"], self.early.pop(lease["id"], lease["state"]))

    async def on_state(self, lease_id: str, state: str) -> None:
        """The stream renders each change with the lease as it is now: a grant may first show as
        `preempted` if it was preempted before the event was rendered."""
        job = self.by_lease.get(lease_id)
        if job is None:
            self.early[lease_id] = state
            return
        if job.get("current") != lease_id or job["end"] is not None:
            return
        if state == "granted" and not job["held"]:
            job["held"] = True
            job["grant"] = job["grant"] or time.monotonic()
            asyncio.get_running_loop().create_task(self.hold_and_release(job, lease_id))
        elif state == "preempted":
            job["preempted"] += 1
            job["current"] = None
            await self.submit(job)  # Kueue requeues a preempted workload

    async def hold_and_release(self, job: dict[str, Any], lease_id: str) -> None:
        await asyncio.sleep(CLASSES[job["class"]][2])
        if job.get("current") != lease_id:
            return  # preempted meanwhile
        answer = await self.call("POST", f"leases/{lease_id}/release/", job["team"], {})
        if answer is not None and answer["state"] == "preempted":
            return  # the preemption event resubmits it
        self.finish(job)

    def finish(self, job: dict[str, Any]) -> None:
        if job["end"] is None:
            job["end"] = time.monotonic()
            self.remaining -= 1
            if self.remaining <= 0:
                self.done.set()

    async def reconcile(self, team: str) -> None:
        """Like a Kubernetes client after a 410: read the state of every lease still waited on."""
        await asyncio.sleep(0.5)  # after the new stream's bookmark
        for lease_id, job in list(self.by_lease.items()):
            if job["team"] == team and job.get("current") == lease_id and job["end"] is None and not job["held"]:
                lease = await self.call("GET", f"leases/{lease_id}/", team)
                if lease is not None:
                    await self.on_state(lease_id, lease["state"])

    async def follow(self, team: str, ready: asyncio.Event) -> None:
        """Follow the team's lease events until cancelled, connecting again whenever the stream
        ends or fails. `ready` is set at the first bookmark (the stream is watching)."""
        while True:
            try:
                await self._watch(team, ready)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._error(f"stream {type(exc).__name__}")
                await asyncio.sleep(0.5)

    async def _watch(self, team: str, ready: asyncio.Event) -> None:
        """One connection to the team's event stream, resumed after the last event seen; returns
        when the stream ends or is refused."""
        headers = {"Authorization": f"Token {self.tokens[team]}"}
        if self.last_event.get(team):
            headers["Last-Event-ID"] = self.last_event[team]
        async with self.http.get(self.url + f"leases/events/?team={team}", headers=headers) as r:
            if r.status == 410:  # changes were lost: watch afresh, then re-read what we wait on
                self.last_event[team] = ""
                asyncio.get_running_loop().create_task(self.reconcile(team))
                return
            if r.status != 200:
                self._error(f"stream HTTP {r.status}")
                await asyncio.sleep(1)
                return
            async for event in _sse_events(r.content):
                if event.get("id"):
                    self.last_event[team] = event["id"]
                if event.get("event") == "bookmark":
                    ready.set()
                elif event.get("event") == "lease":
                    lease = json.loads(event["data"])
                    await self.on_state(lease["id"], lease["state"])


async def _sse_events(lines: AsyncIterable[bytes]) -> AsyncIterator[dict[str, str]]:
    """The Server-Sent Events of a stream, each as its fields (`id`, `event`, `data`)."""
    event: dict[str, str] = {}
    async for raw in lines:
        line = raw.decode().rstrip("\n")
        if line:
            key, _, value = line.partition(": ")
            event[key] = value
            continue
        yield event
        event = {}


def client_main(args: argparse.Namespace) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    tokens = json.loads(args.tokens)
    result = asyncio.run(PoolClient(args.url, args.pool, tokens, args.scale).run())
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--pool", type=int, required=True)
    parser.add_argument("--tokens", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--scale", type=float, default=1.0)
    client_main(parser.parse_args())
