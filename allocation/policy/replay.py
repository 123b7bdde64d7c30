"""The event loop of a trace replay: pure (no I/O, no Django), deterministic, and driven by a
policy function exactly as the live engine drives it. `allocation.simulation.replay` reads the files
and states the replay's semantics; this module keeps the clock and the books.

Every pass sees the pools' settings (`Snapshot.pools`, a `PoolView` per pool); the replay keeps
each pool's `last_fair_share_preemption` up to date: the simulated time of the last pass that
preempted for fair share there, as the live engine records it.

Metrics (CONTRACT `simulate`): utilization = allocated GPU-seconds / (capacity x makespan);
JCT = completion - submit; wait = JCT - the job's duration (the time it made no progress:
queueing, and for preempted jobs the grace and the re-queueing; after a restart, the lost run).
`preemptions` counts every preemption, `preemptions_by_cause` splits it by `Preemption.kind`
(priority, reclaim, fair_share) and `idle` (idle reclaim, `replay_idle.py`); every key is
always present.

Fairness (`jain_index`, `jain_index_backlogged`, `backlogged_s`, the teams' entitled and
achieved shares) is measured by `replay_fairness.py`, on the books kept here.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from allocation.policy.fairshare import ledger_update
from allocation.policy.measures import percentile
from allocation.policy.replay_fairness import FairnessMeter
from allocation.policy.replay_idle import IdleReplay
from allocation.policy.types import (
    Decisions,
    GpuView,
    Grant,
    PoolView,
    Preemption,
    PriorityClassView,
    QuotaView,
    RequestView,
    RunningView,
    Snapshot,
    TeamView,
)

_FINISH, _GRACE_END, _MATURE, _IDLE, _IDLE_END = 0, 1, 2, 3, 4
CAUSES = ("priority", "reclaim", "fair_share")  # every `Preemption.kind`


@dataclass(frozen=True)
class Job:
    index: int
    submit_s: float
    team: str
    gpus: int
    duration_s: float
    priority_class: str = ""
    model: str = ""
    line: int = 0  # where it came from, for error messages
    util_pct: float | None = None  # its GPUs' utilisation (idle reclaim); None: no telemetry
    binding: str = ""  # the workload kind it asks for (process, pod); "" any
    source: str = ""  # the source it is steered to; "" any


class Replay:
    """One replay: `run()` once. `placement` maps a job's index to (pool, same_host); `pools`
    holds the pools' settings (a pool it leaves out has `PoolView`'s defaults); `extras` maps a
    job's index to further fields of its RequestView (`allocation.simulation.replay.request_extras`)."""

    def __init__(self, jobs: Sequence[Job], fleet: tuple[GpuView, ...], teams: Mapping[str, float],
                 quotas: Mapping[tuple[str, str], QuotaView],
                 classes: Mapping[str, PriorityClassView], half_life_s: float,
                 policy: Callable[[Snapshot], Decisions],
                 placement: Mapping[int, tuple[str, bool]], restart: bool = False, *,
                 pools: Mapping[str, PoolView] | None = None,
                 extras: Mapping[int, Mapping[str, Any]] | None = None,
                 parents: Mapping[str, str] | None = None) -> None:
        self.jobs = sorted(jobs, key=lambda j: (j.submit_s, j.index))
        self.fleet, self.quotas, self.classes = fleet, quotas, classes
        self.half_life_s, self.policy, self.placement = half_life_s, policy, placement
        self.restart = restart  # preempted jobs restart from scratch (else resume)
        self.extras = extras or {}
        self.parents = dict(parents or {})  # the team tree: team -> parent
        self.work = {j.index: j.duration_s for j in self.jobs}
        self.weights = {**{j.team: 1.0 for j in self.jobs}, **teams}
        self.capacity: dict[str, int] = defaultdict(int)
        self.gpu_pool = {g.id: g.pool for g in fleet}
        for g in fleet:
            if g.schedulable:
                self.capacity[g.pool] += 1
        # Replaced, never changed in place, when a pass preempts for fair share: a snapshot
        # keeps the settings it was built with.
        self.pools: Mapping[str, PoolView] = {
            **{name: PoolView(name) for name in sorted(self.capacity)}, **(pools or {})}
        self.default_class = classes.get("default") or PriorityClassView("default")
        self.idle = IdleReplay(self.pools)
        self.clock = self.jobs[0].submit_s if self.jobs else 0.0
        self.pending: dict[str, RequestView] = {}
        self.running: dict[str, RunningView] = {}
        self.job_of: dict[str, Job] = {}
        self.started: dict[str, float] = {}
        self.attempts: dict[int, int] = defaultdict(int)
        self.events: list[tuple[float, int, int, str]] = []
        self.seq = 0
        self.held_gpus: set[int] = set()
        self.held: dict[tuple[str, str], int] = defaultdict(int)
        self.waiting: dict[tuple[str, str], int] = defaultdict(int)  # pending GPUs
        self.pool_waiting: dict[str, int] = defaultdict(int)  # pending GPUs per pool
        self.waiting_jobs: dict[str, int] = defaultdict(int)
        self.usage = {t: 0.0 for t in self.weights}
        self.gpu_s: dict[str, float] = defaultdict(float)
        self.by_cause = dict.fromkeys((*CAUSES, "idle"), 0)
        self.allocated_s = 0.0
        self.waits: list[float] = []
        self.jcts: list[float] = []
        self.preemptions = self.violations = self.unplaceable = self.passes = 0
        self.fairness = FairnessMeter(self.capacity, self.weights, quotas, self.held, self.waiting,
                                      self.pool_waiting, self.waiting_jobs)

    # --- the loop ---------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        nxt = 0
        last_event = self.clock
        while nxt < len(self.jobs) or self.events:
            t = min(self.jobs[nxt].submit_s if nxt < len(self.jobs) else float("inf"),
                    self.events[0][0] if self.events else float("inf"))
            self._advance(t)
            changed = False
            while self.events and self.events[0][0] <= t:
                _, kind, _, lease_id = heapq.heappop(self.events)
                changed |= self._event(kind, lease_id, t)
            while nxt < len(self.jobs) and self.jobs[nxt].submit_s <= t:
                self._submit(self.jobs[nxt])
                nxt += 1
                changed = True
            if changed:  # a stale event (a job reclaimed before its finish) is no activity
                last_event = t
            if changed and self.pending:
                self._pass(t)
        self.unplaceable += len(self.pending)  # nothing left that could ever free room for them
        return self._result(last_event)

    def _push(self, when: float, kind: int, lease_id: str) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, kind, self.seq, lease_id))

    def _class(self, job: Job) -> PriorityClassView:
        return self.classes.get(job.priority_class or "default") or self.default_class

    def _submit(self, job: Job) -> None:
        self.attempts[job.index] += 1
        lease_id = f"job-{job.index}" if self.attempts[job.index] == 1 else \
            f"job-{job.index}.{self.attempts[job.index]}"
        pool, same_host = self.placement[job.index]
        cls = self._class(job)
        self.pending[lease_id] = replace(RequestView(
            lease_id, job.team, pool, job.gpus, cls.value, job.submit_s, job.model,
            same_host=same_host, expected_duration_s=job.duration_s), **self.extras.get(job.index, {}))
        self.job_of[lease_id] = job
        self.waiting[(job.team, pool)] += job.gpus
        self.pool_waiting[pool] += job.gpus
        self.waiting_jobs[job.team] += 1

    def _unqueue(self, lease_id: str) -> RequestView:
        req = self.pending.pop(lease_id)
        self.waiting[(req.team, req.pool)] -= req.gpus
        self.pool_waiting[req.pool] -= req.gpus
        self.waiting_jobs[req.team] -= 1
        return req

    def _event(self, kind: int, lease_id: str, t: float) -> bool:
        run = self.running.get(lease_id)
        if kind == _MATURE:
            return run is not None  # a victim may have become eligible
        if kind == _IDLE:
            return run is not None and not run.ending and self._reclaim_idle(run, t)
        if run is None:
            return False  # finished during its grace, or its grace ended before its finish
        del self.running[lease_id]
        self.held_gpus.difference_update(run.gpu_ids)
        self.held[(run.team, run.pool)] -= len(run.gpu_ids)
        job = self.job_of.pop(lease_id)
        if kind == _FINISH:
            # Waiting = all the time it was not making progress, preemptions included.
            self.jcts.append(t - job.submit_s)
            self.waits.append(max(0.0, t - job.submit_s - self.work[job.index]))
        elif kind == _IDLE_END:  # done: the time it ran counts as its work
            self.jcts.append(t - job.submit_s)
            done = self.work[job.index] - max(0.0, job.duration_s - (t - self.started[lease_id]))
            self.waits.append(max(0.0, t - job.submit_s - done))
        else:  # preempted: back in line at its original place, resumed or restarted
            ran = t - self.started[lease_id]
            left = job.duration_s if self.restart else max(0.0, job.duration_s - ran)
            self._submit(replace(job, duration_s=left))
        del self.started[lease_id]
        return True

    def _pass(self, t: float) -> None:
        self.passes += 1
        teams = {name: TeamView(name, w, self.usage.get(name, 0.0), self.parents.get(name, ""))
                 for name, w in self.weights.items()}
        decisions = self.policy(Snapshot(t, self.fleet, teams, self.quotas,
                                         tuple(self.running.values()),
                                         tuple(self.pending.values()), self.classes,
                                         self.half_life_s, estimate_starts=False,
                                         pools=self.pools))
        for grant in decisions.grants:
            self._start(grant, t)
        fair_share_pools = set()
        for stop in decisions.preemptions:
            pool = self._preempt(stop, t)
            if stop.kind == "fair_share":
                fair_share_pools.add(pool)
        for item in decisions.pending:
            if item.unsatisfiable:
                self._unqueue(item.lease_id)
                self.job_of.pop(item.lease_id, None)
                self.unplaceable += 1
        for pool in fair_share_pools:
            self.pools = {**self.pools, pool: replace(self.pools.get(pool) or PoolView(pool),
                                                      last_fair_share_preemption=t)}

    def _start(self, grant: Grant, t: float) -> None:
        """A granted job starts: the books, and the events of its end, min_runtime, idleness."""
        req = self._unqueue(grant.lease_id)
        if len(set(grant.gpu_ids)) != req.gpus or self.held_gpus.intersection(grant.gpu_ids) \
                or any(self.gpu_pool.get(g) != req.pool for g in grant.gpu_ids):
            raise RuntimeError(f"policy granted invalid GPUs {grant.gpu_ids} to {req}")
        job = self.job_of[req.lease_id]
        cls = self._class(job)
        self.running[req.lease_id] = RunningView(
            req.lease_id, req.team, req.pool, tuple(grant.gpu_ids), req.priority,
            cls.preemptible, t, grant.borrowed, cls.min_runtime_s, t + job.duration_s)
        self.held_gpus.update(grant.gpu_ids)
        key = (req.team, req.pool)
        self.held[key] += req.gpus
        limit = self.quotas[key].limit if key in self.quotas else None
        if limit is not None and self.held[key] > limit:
            self.violations += 1
        self.started[req.lease_id] = t
        self._push(t + job.duration_s, _FINISH, req.lease_id)
        idle_at = self.idle.reclaim_at(job.util_pct, cls, req.pool, t)
        if idle_at is not None and idle_at < t + job.duration_s:
            self._push(idle_at, _IDLE, req.lease_id)
        if cls.preemptible and cls.min_runtime_s > 0:
            self._push(t + cls.min_runtime_s, _MATURE, req.lease_id)

    def _preempt(self, stop: Preemption, t: float) -> str:
        """Start the victim's grace; count the preemption by its cause. Returns its pool."""
        victim = self.running.get(stop.lease_id)
        if victim is None or victim.ending:
            raise RuntimeError(f"policy preempted {stop.lease_id}, which is not running or "
                               "already ending")
        if stop.kind not in self.by_cause:
            raise RuntimeError(f"policy preempted {stop.lease_id} for an unknown cause {stop.kind!r}")
        grace = self._class(self.job_of[stop.lease_id]).grace_s
        end = t + grace if victim.expected_end is None else min(victim.expected_end, t + grace)
        self.running[stop.lease_id] = replace(victim, ending=True, expected_end=end)
        self._push(t + grace, _GRACE_END, stop.lease_id)
        self.preemptions += 1
        self.by_cause[stop.kind] += 1
        return victim.pool

    def _reclaim_idle(self, run: RunningView, t: float) -> bool:
        """Reclaim an idle job: it stops after its class's grace, and is done (not re-queued)."""
        grace = self._class(self.job_of[run.lease_id]).grace_s
        end = t + grace if run.expected_end is None else min(run.expected_end, t + grace)
        self.running[run.lease_id] = replace(run, ending=True, expected_end=end)
        self._push(t + grace, _IDLE_END, run.lease_id)
        self.preemptions += 1
        self.by_cause["idle"] += 1
        return True

    # --- books ------------------------------------------------------------------------------------

    def _advance(self, t: float) -> None:
        dt = t - self.clock
        if dt <= 0:
            return
        per_team: dict[str, int] = defaultdict(int)
        for (team, _), n in self.held.items():
            per_team[team] += n
        for team in self.usage:
            self.usage[team] = ledger_update(self.usage[team], self.clock, t, per_team[team],
                                             self.half_life_s)
        for team, n in per_team.items():
            self.gpu_s[team] += n * dt
            self.allocated_s += n * dt
        self.fairness.measure(dt)
        self.clock = t

    def _result(self, end: float) -> dict[str, Any]:
        start = self.jobs[0].submit_s if self.jobs else 0.0
        makespan = max(0.0, end - start)
        capacity = sum(self.capacity.values())
        waits, jcts = sorted(self.waits), sorted(self.jcts)
        fairness = self.fairness
        return {
            **fairness.by_level(self.parents),
            "jobs": len(self.jobs),
            "makespan_s": round(makespan, 3),
            "utilization": round(self.allocated_s / (capacity * makespan), 4)
            if capacity and makespan else 0.0,
            "wait_s": {"mean": round(sum(waits) / len(waits), 3) if waits else 0.0,
                       "p50": round(percentile(waits, 0.5), 3),
                       "p95": round(percentile(waits, 0.95), 3),
                       "max": round(waits[-1], 3) if waits else 0.0},
            "jct_s": {"mean": round(sum(jcts) / len(jcts), 3) if jcts else 0.0,
                      "p95": round(percentile(jcts, 0.95), 3)},
            "teams": {t: {"gpu_hours": round(self.gpu_s[t] / 3600.0, 3), **fairness.shares(t)}
                      for t in sorted(self.weights)},
            "jain_index": fairness.jain_index(),
            "preemptions": self.preemptions,
            "preemptions_by_cause": dict(self.by_cause),
            "jain_index_backlogged": fairness.backlogged_index(),
            "backlogged_s": round(fairness.backlogged_s, 3),
            "quota_violations": self.violations,
            "unplaceable": self.unplaceable,
            "wall_s": 0.0,
        }
