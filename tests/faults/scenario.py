"""What every load-and-fault scenario does around its fault: start the clients, sample the
invariants, stop, wait for the queue to settle, check everything, print and write the figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stacktools.processes import REPO
from stacktools.ready import wait_until
from tests.faults.agent_fixtures import Figures
from tests.faults.events_check import check_events
from tests.faults.invariants import Sampler, eligible_pending, ending_leases, final_check
from tests.faults.load import READY_TIMEOUT_S
from tests.faults.stack import Stack

#: `make faults` sets GPUPOOL_FAULTS=full: the sizes the issue asks for. `make test` runs the
#: same scenarios reduced to a few minutes in all.
FULL = os.environ.get("GPUPOOL_FAULTS", "").lower() == "full"
MEMBERS = [f"user{i}" for i in range(8)]
TEAMS = ("vision", "nlp", "research")
POOLS = ("a", "b")


def config() -> dict[str, Any]:
    """Two pools of 6 hosts × 8 simulated GPUs, three teams with quotas in both and no limits
    (so 'eligible' means: fits on a host), a fast periodic pass; and a pool `probe` (two hosts)
    the load never touches, where a scenario measures how soon a pass grants."""
    pools = (*POOLS, "probe")
    return {
        "pools": [{"name": p} for p in pools],
        "teams": [{"name": t, "weight": w} for t, w in zip(TEAMS, (2, 1, 1), strict=True)],
        "quotas": [{"team": t, "pool": p, "guaranteed": 8, "limit": None} for t in TEAMS for p in pools],
        "priority_classes": [{"name": "default", "value": 0}],
        "scheduler": {"pass_interval_s": 2},
        "sources": [{"name": f"sim-{p}", "kind": "simulated", "pool": p, "hosts": 2 if p == "probe" else 6,
                     "gpus_per_host": 8, "model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559, "interval_s": 30}
                    for p in pools],
    }


def users() -> dict[str, dict[str, Any]]:
    members = {name: {"teams": [TEAMS[i % len(TEAMS)]]} for i, name in enumerate(MEMBERS)}
    return {**members, "admin": {"admin": True, "teams": [TEAMS[0]]}}


@dataclass
class Load:
    """Client processes running against the stack; `finish` waits for them and merges their
    summaries."""

    stack: Stack
    root: Path
    clients: int = len(MEMBERS)
    ops_each: int | None = None
    duration_s: float | None = None
    admin: bool = True
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    outs: list[Path] = field(default_factory=list)
    readies: list[Path] = field(default_factory=list)

    def start(self) -> Load:
        self.stop_file = self.root / "stop-load"
        self.stop_file.unlink(missing_ok=True)
        names = MEMBERS[: self.clients] + (["admin"] if self.admin else [])
        for i, name in enumerate(names):
            out = self.root / f"load-{name}.json"
            ready = self.root / f"load-{name}.ready"
            ready.unlink(missing_ok=True)
            spec = {"name": name, "url": self.stack.url, "token": self.stack.tokens[name], "seed": i,
                    "pools": list(POOLS), "sources": [f"sim-{p}" for p in POOLS], "admin": name == "admin",
                    "out": str(out), "stop_file": str(self.stop_file), "ready_file": str(ready)}
            if self.ops_each is not None and name != "admin":
                spec["ops"] = self.ops_each
            if self.duration_s is not None:
                spec["duration_s"] = self.duration_s
            self.outs.append(out)
            self.readies.append(ready)
            self.procs.append(subprocess.Popen([sys.executable, "-m", "tests.faults.load", json.dumps(spec)],
                                               cwd=REPO))
        self.began = time.time()
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_S + 30) -> None:
        """Until every client has read what it needs from the API (it touches its ready file):
        a scenario's fault must not meet a client still starting (on a busy machine, seconds)."""
        def all_ready() -> bool:
            gone = [ready.stem for ready, proc in zip(self.readies, self.procs, strict=True) if proc.poll() is not None]
            assert not gone, f"load clients exited before they were ready: {gone}"
            return all(ready.exists() for ready in self.readies)

        if not wait_until(all_ready, timeout, interval=0.2):
            waiting = [ready.stem for ready in self.readies if not ready.exists()]
            raise AssertionError(f"load clients not ready within {timeout:.0f} s: {waiting}")

    def stop_admin_when_members_done(self) -> None:
        """A count-bound run: once every member has done its share, tell the admin to finish."""
        for proc in self.procs[: self.clients]:
            proc.wait()
        self.stop_file.write_text("stop")

    def abandon(self, timeout: float = 30) -> None:
        """After a failed scenario: stop the clients (killed past `timeout`), none left running."""
        self.stop_file.write_text("stop")
        for proc in self.procs:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def finish(self, timeout: float = 3600) -> dict[str, Any]:
        self.stop_file.write_text("stop")
        for proc in self.procs:
            proc.wait(timeout=timeout)
        self.wall_s = time.time() - self.began
        merged: dict[str, Any] = {"ops": 0, "counts": defaultdict(lambda: defaultdict(int)), "errors": [],
                                  "idempotency_mismatches": 0, "latency": defaultdict(list),
                                  "acked_creates": [], "acked_releases": []}
        for out in self.outs:
            part = json.loads(out.read_text())
            merged["ops"] += part["ops"]
            merged["idempotency_mismatches"] += part["idempotency_mismatches"]
            merged["errors"] += part["errors"]
            merged["acked_creates"] += part["acked_creates"]
            merged["acked_releases"] += part["acked_releases"]
            for op, statuses in part["counts"].items():
                for status, n in statuses.items():
                    merged["counts"][op][status] += n
            for op, values in part["latency"].items():
                merged["latency"][op] += values
        return merged


def begin(stack: Stack, scenario: str, root: Path, **load: Any) -> tuple[Figures, Sampler, Load]:
    """What every scenario starts with: its figures (mode named), the invariant sampler running,
    and the load started (by default: until stopped)."""
    figures = Figures(scenario)
    figures["mode"] = "full" if FULL else "reduced"
    sampler = Sampler(stack.pg.url())
    sampler.start()
    return figures, sampler, Load(stack, root, **({"duration_s": 3600} | load)).start()


def requests_sent(merged: dict[str, Any]) -> int:
    return sum(sum(statuses.values()) for statuses in merged["counts"].values())


def errors_outside(merged: dict[str, Any], windows: list[tuple[float, float]]) -> list[dict[str, Any]]:
    """5xx answers and connection failures outside every (start, end) outage window."""
    return [e for e in merged["errors"] if not any(a <= e["t"] <= b for a, b in windows)]


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1) if ordered else 0.0


def settle_and_check(stack: Stack, figures: Figures, sampler: Sampler, timeout: float = 120) -> None:
    """After the load: wait until no eligible lease is pending (passes keep running: beat's
    periodic one at least), then check every invariant; record and assert.

    'Eligible' is judged by SQL (fits in the free GPUs of one ready host of its pool), which is
    blunter than the policy: a pass rightly keeps free GPUs for an earlier request waiting for
    GPUs being freed on the same host (a drain's notice: until the grace period ends). The load's
    leases all end within a minute of it stopping (TTLs ≤ 60 s) and notices within their grace,
    so the wait is bounded; the figure says how long it took."""
    began = time.monotonic()
    at_stop = eligible_pending(stack.pg.url())
    figures["eligible_pending_at_stop"] = len(at_stop)
    if at_stop:  # why the pass left them (its own words), to tell policy from a lost trigger
        figures["eligible_pending_reasons"] = sorted({reason for *_, reason in at_stop})[:3]
    url = stack.pg.url()
    stuck = wait_until(lambda: not ending_leases(url) and not eligible_pending(url), timeout=timeout, interval=0.5)
    figures["settle_s"] = round(time.monotonic() - began, 2)
    sampler.stop()
    findings = final_check(stack.pg.url())
    pending = eligible_pending(stack.pg.url())
    figures["invariant_samples"] = sampler.samples
    figures["invariant_violations_sampled"] = len(sampler.violations)
    figures["invariant_findings_after"] = {k: len(v) for k, v in findings.items()}
    figures["eligible_stuck_pending"] = len(pending)
    events = check_events(stack.pg.url(), stack.redis_client())
    figures["lease_events"] = events
    figures.write()
    assert not sampler.violations, f"invariants broken during the run: {sampler.violations[:10]}"
    assert not findings, f"invariants broken after the run: {findings}"
    assert stuck and not pending, f"eligible leases stuck pending: {pending[:10]}\n{stack.dump_logs()}"
    assert not events["findings"], f"lease events lost, doubled or out of order: {events['findings']}"


def record_load(figures: Figures, merged: dict[str, Any]) -> None:
    figures["api_requests"] = requests_sent(merged)
    figures["ops_by_kind"] = {op: sum(s.values()) for op, s in sorted(merged["counts"].items())}
    figures["status_counts"] = dict(sorted(_by_status(merged).items()))
    figures["idempotency_mismatches"] = merged["idempotency_mismatches"]
    create = merged["latency"].get("create", [])
    figures["create_p50_ms"], figures["create_p99_ms"] = p(create, 0.5), p(create, 0.99)


def _by_status(merged: dict[str, Any]) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for statuses in merged["counts"].values():
        for status, n in statuses.items():
            totals[status] += n
    return totals
