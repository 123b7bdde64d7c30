"""Trace replay: job traces, the simulated fleet of a config, the Alibaba trace, and `simulate`,
an event-driven loop on a simulated clock through the very policy functions production uses.

No Django. Semantics of the replay (the contract of `simulate`):
- A pass runs after every batch of simultaneous events (submit, finish, end of a preemption's
  grace, a preemptible lease reaching its min_runtime) while something is pending, exactly as
  the live engine passes on events; nothing else can change a decision in between.
- Jobs run for exactly `duration_s` and the policy is told so (`expected_duration_s`): backfill
  sees perfect estimates, as in most scheduler simulators.
- A preempted job stops after its class's grace_s (it runs during the grace) and re-queues with
  its original submit time, so it keeps its place in line. By default it then *resumes* with
  its remaining duration (jobs that run on preemptible capacity checkpoint, as Gavel and
  Tiresias assume); `restart=True` makes it start over (no checkpoint), and its lost GPU time
  still counts as allocated.
- Every pass sees the pools' settings (`pool_views`: fair-share preemption and its interval),
  and the time of each pool's last fair-share preemption, as the live engine keeps it.
- Idle reclaim (`idle_reclaim` of pools and classes) by the live rule, for jobs with a
  `util_pct` (`allocation.policy.replay_idle`); counted in `preemptions_by_cause["idle"]`.
- A trace job is one lease on one host when its pool has a host that large (`same_host`), else a
  multi-host gang. Its pool is the first pool (config order) with a GPU of its model large
  enough for it. Only GPUs the policy finds eligible for it count: its model, and where the
  trace says so the workload kind it binds and the source it is steered to
  (`allocation.simulation.where`), which the policy then honours as for a lease.
The metrics, fairness included, are defined in `allocation.policy.replay`.
"""

from __future__ import annotations

import csv
import math
import time
import zlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agents.registry import placement_domain, placement_traits
from agents.simulated import DEFAULTS as SIMULATED_DEFAULTS
from allocation.config import POOL_SCHEDULER_KEYS, SchedulerSpec
from allocation.policy import get_policy
from allocation.policy.idle import IdleReclaim
from allocation.policy.matching import Constraint, GroupKey, Kind, kind_eligible, kind_of, model_alternatives
from allocation.policy.replay import Job, Replay
from allocation.policy.replay_topology import TopologyReplay, racks_of
from allocation.policy.types import GpuView, PoolView, PriorityClassView, QuotaView
from allocation.simulation.where import BINDINGS, TraceError, check_sources, request_extras, tag_fleet

TRACE_COLUMNS = ("submit_s", "team", "gpus", "duration_s", "priority_class", "model", "util_pct")
# Optional columns for mixed pools: the workload kind a job binds, and the source it is steered to.
EXTRA_COLUMNS = ("binding", "source")
# The simulated connector's own defaults, so a replay sees the fleet `discover` would build.
SIM_DEFAULTS: dict[str, Any] = SIMULATED_DEFAULTS


# --- traces --------------------------------------------------------------------------------------


def load_trace(path: str | Path) -> list[Job]:
    """Read a trace CSV (header required; `priority_class`, `model`, `util_pct`, `binding` and
    `source` columns optional, `util_pct` empty for a job without telemetry, `binding` process,
    pod or empty, `source` a source name or empty; blank and '#' lines skipped).
    Raises TraceError listing up to 20 bad lines. Sorted by submit time."""
    jobs: list[Job] = []
    errors: list[str] = []
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in TRACE_COLUMNS[:4] if c not in header]
        if missing:
            raise TraceError(f"{path}:1: header must name {', '.join(TRACE_COLUMNS[:4])}; "
                             f"missing {', '.join(missing)}")
        col = {name: header.index(name) for name in TRACE_COLUMNS + EXTRA_COLUMNS if name in header}
        for line, row in enumerate(reader, start=2):
            if not any(cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
                continue
            try:
                jobs.append(_job(row, col, len(jobs), line))
            except ValueError as exc:
                errors.append(f"{path}:{line}: {exc}")
    if errors:
        more = f"\n... and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise TraceError("\n".join(errors[:20]) + more)
    jobs.sort(key=lambda j: (j.submit_s, j.index))
    return jobs


def _job(row: list[str], col: Mapping[str, int], index: int, line: int) -> Job:
    def cell(name: str) -> str:
        i = col.get(name)
        return row[i].strip() if i is not None and i < len(row) else ""

    submit, duration = _number(cell("submit_s"), "submit_s"), _number(cell("duration_s"), "duration_s")
    team, model = cell("team"), cell("model")
    if not team:
        raise ValueError("team is empty")
    try:
        gpus = int(cell("gpus"))
    except ValueError:
        raise ValueError(f"gpus must be a whole number, got {cell('gpus')!r}") from None
    if gpus < 1:
        raise ValueError(f"gpus must be at least 1, got {gpus}")
    if model and len(model_alternatives(model)) != len(model.split("|")):
        raise ValueError(f"model {model!r} has an empty alternative")
    binding = cell("binding")
    if binding not in ("", *BINDINGS):
        raise ValueError(f"binding must be {' or '.join(BINDINGS)} or empty, got {binding!r}")
    return Job(index, submit, team, gpus, duration, cell("priority_class"), model, line, _util(cell("util_pct")),
               binding, cell("source"))


def _util(text: str) -> float | None:
    """A job's GPU utilisation, 0..100; None for an empty cell (no telemetry)."""
    if not text:
        return None
    value = _number(text, "util_pct")
    if value > 100:
        raise ValueError(f"util_pct must be within [0, 100], got {text!r}")
    return value


def _number(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {text!r}")
    return value


def write_trace(path: str | Path, jobs: Sequence[Job]) -> None:
    """The contract's columns; `binding` and `source` too when a job sets one."""
    extra = any(j.binding or j.source for j in jobs)
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(TRACE_COLUMNS + EXTRA_COLUMNS if extra else TRACE_COLUMNS)
        for j in jobs:
            out.writerow([_num(j.submit_s), j.team, j.gpus, _num(j.duration_s), j.priority_class,
                          j.model, "" if j.util_pct is None else _num(j.util_pct),
                          *((j.binding, j.source) if extra else ())])


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


# --- configuration -------------------------------------------------------------------------------


@dataclass
class SimConfig:
    gpus: tuple[GpuView, ...]
    teams: dict[str, float]
    quotas: dict[tuple[str, str], QuotaView]
    priority_classes: dict[str, PriorityClassView]
    half_life_s: float
    pools: dict[str, PoolView] = field(default_factory=dict)
    gpu_sources: dict[int, str] = field(default_factory=dict)  # GPU id -> its source's name
    parents: dict[str, str] = field(default_factory=dict)  # team -> its parent (the team tree)


def pool_views(pools: Sequence[Mapping[str, Any]],
               scheduler: Mapping[str, Any]) -> dict[str, PoolView]:
    """The replay's settings per pool, from `pools:` and `scheduler:` in the `apply -f` format
    (the one place that reads them for the simulator; both loaders below call it): a pool's own
    `scheduler:` values where it sets them, else the `scheduler:` section's, else the defaults."""
    default = SchedulerSpec()
    views = {}
    for pool in pools:
        own = pool.get("scheduler") or {}
        settings: dict[str, Any] = {
            key: own.get(key) if own.get(key) is not None else scheduler.get(key, getattr(default, key))
            for key in POOL_SCHEDULER_KEYS}
        name = str(pool["name"])
        views[name] = PoolView(name, share_across_teams=bool(pool.get("share_across_teams", False)),
                               fair_share_preemption=bool(settings["fair_share_preemption"]),
                               fair_share_preemption_interval_s=float(
                                   settings["fair_share_preemption_interval_s"]),
                               idle_reclaim=idle_rule(pool.get("idle_reclaim")))
    return views


def idle_rule(value: Mapping[str, Any] | None) -> IdleReclaim | None:
    """`idle_reclaim:` of a pool or a class as the file writes it (validated, or trusted)."""
    if not value:
        return None
    return IdleReclaim(float(value["below_util_pct"]), float(value["for_s"]), float(value["warn_s"]))


def fleet_from_config(data: Mapping[str, Any]) -> tuple[GpuView, ...]:
    """The GPUs of the config's `simulated` sources (other kinds are ignored), named as the
    simulated connector names them (`{host_prefix or NAME-node}-{i}`), ids numbered from 1, with
    the workloads and placement domain the registry gives a simulated source."""
    return config_fleet(data)[0]


def config_fleet(data: Mapping[str, Any]) -> tuple[tuple[GpuView, ...], dict[int, str]]:
    """`fleet_from_config`, and each GPU's source name (GPU id -> name)."""
    gpus: list[GpuView] = []
    sources: dict[int, str] = {}
    workloads = placement_traits("simulated")[0]
    for src in data.get("sources") or []:
        if src.get("kind") != "simulated":
            continue
        opt = {**SIM_DEFAULTS, **{k: v for k, v in src.items() if v is not None}}
        prefix = src.get("host_prefix") or f"{src['name']}-node"
        domain = placement_domain("simulated", str(src["name"]))
        for h in range(int(opt["hosts"])):
            for _ in range(int(opt["gpus_per_host"])):
                gpus.append(GpuView(len(gpus) + 1, str(src["pool"]), f"{prefix}-{h}",
                                    str(opt["model"]), int(opt["memory_mb"]),
                                    str(opt["driver_version"]), str(opt["cuda_version"]),
                                    workloads=workloads, domain=domain))
                sources[len(gpus)] = str(src["name"])
    return tuple(gpus), sources


def sim_config_from_dict(data: Mapping[str, Any]) -> SimConfig:
    """A SimConfig from a config mapping in the `apply -f` format (already validated, or trusted)."""
    teams = {t["name"]: float(t.get("weight", 1)) for t in data.get("teams") or []}
    quotas = {(q["team"], q["pool"]): QuotaView(q["team"], q["pool"], int(q.get("guaranteed", 0)),
                                                q.get("limit"), q.get("lending_limit"))
              for q in data.get("quotas") or []}
    classes = {c["name"]: PriorityClassView(c["name"], int(c.get("value", 0)),
                                            bool(c.get("preemptible", False)),
                                            int(c.get("min_runtime_s", 0)), int(c.get("grace_s", 30)),
                                            idle_rule(c.get("idle_reclaim")))
               for c in data.get("priority_classes") or []}
    scheduler = data.get("scheduler") or {}
    hours = float(scheduler.get("fair_share_half_life_hours", 168))
    gpus, sources = config_fleet(data)
    parents = {t["name"]: t["parent"] for t in data.get("teams") or [] if t.get("parent")}
    return SimConfig(gpus, teams, quotas, classes, hours * 3600.0,
                     pool_views(data.get("pools") or [], scheduler), sources, parents)


def load_sim_config(path: str | Path) -> SimConfig:
    """Read a config file with the project's validating loader (`allocation.config`)."""
    from allocation.config import load_config_file

    cfg = load_config_file(path)
    sources = [{"name": src.name, "kind": src.kind, "pool": src.pool, **src.options} for src in cfg.sources]
    hours = cfg.scheduler.fair_share_half_life_hours if cfg.scheduler else 168.0
    gpus, gpu_sources = config_fleet({"sources": sources})
    return SimConfig(gpus, {t.name: t.weight for t in cfg.teams},
                     {(q.team, q.pool): q for q in cfg.quotas},
                     {c.name: c for c in cfg.priority_classes}, hours * 3600.0,
                     # The parsed specs as the file's mappings: one reader of pool settings.
                     pool_views([asdict(p) for p in cfg.pools],
                                asdict(cfg.scheduler) if cfg.scheduler else {}), gpu_sources,
                     {t.name: t.parent for t in cfg.teams if t.parent})


# --- the Alibaba GPU trace (cluster-trace-gpu-v2023) ---------------------------------------------

ALIBABA_QOS = {"LS": "high", "Burstable": "default", "Guaranteed": "default", "BE": "best-effort"}
# Memory is not in the node list; nominal sizes for the public models, 16 GiB for internal codes.
ALIBABA_MEMORY_MB = {"T4": 15360, "P100": 16384, "V100M16": 16384, "V100M32": 32768, "A10": 23028}


def convert_alibaba(pod_csv: str | Path, node_csv: str | Path,
                    teams: int = 4) -> tuple[list[Job], dict[str, Any]]:
    """(jobs, config mapping) from the openb pod and node lists.

    Jobs: arrival = creation_time, duration = deletion_time - scheduled_time; pods without GPUs,
    never scheduled or never deleted are skipped. QoS LS -> high, Burstable/Guaranteed ->
    default, BE -> best-effort. A fractional GPU (gpu_milli < 1000) becomes one whole GPU: the
    pool hands out whole devices, so the replay is conservative about capacity. Team = crc32 of
    the pod name modulo `teams` ("team-0" ...), stable across runs and machines.
    Config: one pool `openb`, one simulated source per (model, GPUs per node), each team
    guaranteed an equal part of half the fleet, no limit; priority classes as in the contract."""
    groups: dict[tuple[str, int], int] = defaultdict(int)
    with open(node_csv, newline="") as fh:
        for row in csv.DictReader(fh):
            if int(row["gpu"] or 0) > 0:
                groups[(row["model"], int(row["gpu"]))] += 1
    jobs: list[Job] = []
    with open(pod_csv, newline="") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            gpus = int(row["num_gpu"] or 0)
            if gpus <= 0 or not row["deletion_time"] or not row["scheduled_time"]:
                continue
            duration = float(row["deletion_time"]) - float(row["scheduled_time"])
            team = f"team-{zlib.crc32(row['name'].encode()) % teams}"
            jobs.append(Job(len(jobs), float(row["creation_time"]), team, gpus, max(0.0, duration),
                            ALIBABA_QOS.get(row["qos"], "default"), row["gpu_spec"], line))
    jobs.sort(key=lambda j: (j.submit_s, j.index))
    capacity = sum(n * g for (_, g), n in groups.items())
    sources = [{"name": f"openb-{model.lower()}-{g}", "kind": "simulated", "pool": "openb",
                "hosts": n, "gpus_per_host": g, "model": model,
                "memory_mb": ALIBABA_MEMORY_MB.get(model, 16384)}
               for (model, g), n in sorted(groups.items())]
    names = [f"team-{i}" for i in range(teams)]
    config = {
        "pools": [{"name": "openb", "description": "Alibaba openb GPU nodes"}],
        "teams": [{"name": n, "weight": 1} for n in names],
        "quotas": [{"team": n, "pool": "openb", "guaranteed": capacity // (2 * teams),
                    "limit": None} for n in names],
        "priority_classes": [
            {"name": "high", "value": 100, "preemptible": False},
            {"name": "default", "value": 0},
            {"name": "best-effort", "value": -10, "preemptible": True, "min_runtime_s": 300,
             "grace_s": 30}],
        "scheduler": {"fair_share_half_life_hours": 168, "pass_interval_s": 10},
        "sources": sources,
    }
    return jobs, config


# --- the replay ----------------------------------------------------------------------------------


def _pools_for(jobs: Sequence[Job], fleet: Sequence[GpuView],
               extras: Mapping[int, Mapping[str, Any]]) -> dict[int, tuple[str, bool]]:
    """(pool, same_host) per job: the first pool with GPUs of one group (model, MIG profile,
    time-slicing, placement domain) enough for it among those the policy finds eligible (its
    model, and the binding and source its RequestView gets: `extras`); same_host where one host
    has that many."""
    sizes: dict[str, dict[Kind, dict[str, int]]] = {}  # pool -> kind -> host -> GPUs
    for g in fleet:
        if g.schedulable:
            per = sizes.setdefault(g.pool, {}).setdefault(kind_of(g), {})
            per[g.host] = per.get(g.host, 0) + 1
    pools = list(sizes) or ["default"]
    cache: dict[tuple[Constraint, int, str], tuple[str, bool]] = {}
    out = {}
    for job in jobs:
        extra = extras.get(job.index, {})
        constraint = (job.model, 0, "", "", extra.get("workload", ""), extra.get("selector", ""))
        key = (constraint, job.gpus, job.team)
        if key not in cache:
            cache[key] = (pools[0], True)
            for pool in pools:
                block, total = _room(sizes.get(pool, {}), constraint, job.team)
                if total >= job.gpus:
                    cache[key] = (pool, job.gpus <= block)
                    break
        out[job.index] = cache[key]
    return out


def _room(kinds: Mapping[Kind, Mapping[str, int]], constraint: Constraint, team: str) -> tuple[int, int]:
    """(the most GPUs of one eligible group on one host, the most of one eligible group)."""
    groups: dict[GroupKey, dict[str, int]] = {}
    for kind, hosts in kinds.items():
        if kind_eligible(kind, constraint, team):
            per = groups.setdefault(kind.group_key, {})
            for host, n in hosts.items():
                per[host] = per.get(host, 0) + n
    return (max((max(per.values()) for per in groups.values()), default=0),
            max((sum(per.values()) for per in groups.values()), default=0))


def simulate(jobs: Sequence[Job], fleet: tuple[GpuView, ...], teams: Mapping[str, float],
             quotas: Mapping[tuple[str, str], QuotaView],
             priority_classes: Mapping[str, PriorityClassView], half_life_s: float = 168 * 3600.0,
             policy_name: str = "fair", *, restart: bool = False,
             pools: Mapping[str, PoolView] | None = None,
             gpu_sources: Mapping[int, str] | None = None,
             parents: Mapping[str, str] | None = None, rack_size: int = 0,
             topology_aware: bool = True) -> dict[str, Any]:
    """Replay `jobs` on `fleet` through policy `policy_name`; returns the CONTRACT's metrics.
    `pools`: the pools' settings (`pool_views`); a pool left out has the defaults.
    `gpu_sources`: each GPU's source name, for jobs steered to a source (`Job.source`).
    `parents`: the team tree (team -> parent); the result then has `jain_index_by_level`.
    `rack_size` > 0: hosts in racks of that many, measured (and, `topology_aware`, given to the
    policy) by `allocation.policy.replay_topology`.
    Raises TraceError for a job naming an unknown priority class or source, RuntimeError if
    the policy ever grants a GPU twice or preempts an ending lease."""
    known = set(priority_classes) | {""}
    bad = [j for j in jobs if j.priority_class not in known and j.priority_class != "default"]
    if bad:
        raise TraceError(f"trace line {bad[0].line}: unknown priority class "
                         f"{bad[0].priority_class!r} (known: {', '.join(sorted(priority_classes))})")
    check_sources(jobs, (gpu_sources or {}).values())
    started = time.perf_counter()
    fleet = tag_fleet(fleet, gpu_sources or {}, jobs)
    extras = {j.index: extra for j in jobs if (extra := request_extras(j))}
    args = (jobs, fleet, teams, quotas, priority_classes, half_life_s, get_policy(policy_name),
            _pools_for(jobs, fleet, extras), restart)
    replay = (TopologyReplay(*args, pools=pools, extras=extras, parents=parents,
                             racks=racks_of(fleet, rack_size), aware=topology_aware)
              if rack_size > 0 else Replay(*args, pools=pools, extras=extras, parents=parents))
    result = replay.run()
    result["wall_s"] = round(time.perf_counter() - started, 3)
    return result
