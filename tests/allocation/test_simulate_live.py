"""`manage.py simulate --fleet live --pool P TRACE`: the replay runs on the pool's inventory as the
engine reads it (ssh and kubernetes hosts, MIG slices, time-sliced replicas, hosts and GPUs out of
service), with the database's teams, quotas and classes or a config file's."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from dataclasses import astuple, replace
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from allocation.policy.types import Decisions, GpuView, Snapshot
from allocation.simulation import replay as simulation
from allocation.simulation.live import live_fleet
from allocation.simulation.replay import convert_alibaba, load_sim_config, load_trace, simulate, write_trace
from inventory.choices import Health, HostState
from inventory.models import Gpu, Host, Pool, Source

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
# The Alibaba trace stays outside the repository (its terms): ../shared/traces beside the checkout.
TRACES = Path(os.environ.get("GPUPOOL_TRACE") or ROOT.parent / "shared" / "traces")

SETTINGS = """
pools: [{name: mixed}, {name: other}, {name: empty}]
teams: [{name: a, weight: 2}, {name: b}]
quotas:
  - {team: a, pool: mixed, guaranteed: 4}
priority_classes:
  - {name: high, value: 100}
  - {name: default, value: 0}
  - {name: best-effort, value: -10, preemptible: true, grace_s: 30}
"""
A100, H100, L4, T4 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA L4", "Tesla T4"
_UUIDS = itertools.count()


def _host(source: Source, name: str, state: str = HostState.READY) -> Host:
    return Host.objects.create(source=source, name=name, state=state, reported_state=state,
                               driver_version="550.54.15", cuda_version="12.4")


def _gpus(host: Host, n: int, model: str, **fields: Any) -> list[Gpu]:
    return [Gpu.objects.create(uuid=f"GPU-{next(_UUIDS)}", host=host, pool=host.source.pool, index=i,
                               model=model, memory_mb=81920, **fields) for i in range(n)]


@pytest.fixture
def mixed(apply_yaml: Callable[..., Any]) -> dict[str, Any]:
    """Pool `mixed`: an ssh source `vm` and a kubernetes source `kc`, each with hosts in and out
    of service; 22 GPUs in service (MIG slices and time-sliced replicas counting one each)."""
    apply_yaml(SETTINGS, discover=False)
    pool = Pool.objects.get(name="mixed")
    vm = Source.objects.create(name="vm", kind="ssh", pool=pool)
    kc = Source.objects.create(name="kc", kind="kubernetes", pool=pool)
    out: dict[str, list[Gpu]] = {}
    vm0 = _gpus(_host(vm, "vm-0"), 4, A100)
    Gpu.objects.filter(pk=vm0[3].pk).update(health=Health.UNHEALTHY)
    out["in"] = vm0[:3]
    out["out"] = [vm0[3], *_gpus(_host(vm, "vm-1", HostState.OFFLINE), 4, A100)]
    vm2 = _host(vm, "vm-2")
    parent = _gpus(vm2, 1, A100)[0]
    out["in"] += [Gpu.objects.create(uuid=f"MIG-{next(_UUIDS)}", host=vm2, pool=pool, parent=parent, index=i,
                                     model=A100, memory_mb=20096, mig_profile="2g.20gb") for i in range(3)]
    out["parent"] = [parent]
    out["in"] += _gpus(_host(vm, "vm-3"), 4, L4, shared_replicas=4, physical_uuid="GPU-l4-physical")
    node_a = _host(kc, "node-a")
    out["in"] += _gpus(node_a, 4, H100)
    out["out"] += [Gpu.objects.create(uuid=f"GPU-{next(_UUIDS)}", host=node_a, pool=pool, index=4, model=H100,
                                      foreign=True)]
    out["out"] += _gpus(_host(kc, "node-b", HostState.CORDONED), 8, H100)
    out["in"] += _gpus(_host(kc, "node-c"), 8, T4, shared_replicas=4)  # the device plugin's replicas
    other = Source.objects.create(name="elsewhere", kind="ssh", pool=Pool.objects.get(name="other"))
    _gpus(_host(other, "far-0"), 8, H100)
    return out


def _trace(tmp_path: Path, rows: list[str], header: str = "submit_s,team,gpus,duration_s,priority_class,model") -> str:
    path = tmp_path / "trace.csv"
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return str(path)


def _simulate(*args: str, **opts: Any) -> dict[str, Any]:
    out = StringIO()
    call_command("simulate", *args, stdout=out, **opts)
    return json.loads(out.getvalue())


@pytest.fixture
def grants(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[int, ...]]:
    """Every grant the replay's policy makes: lease id (`job-N`, N the job's row in the trace
    from 0) -> GPU ids."""
    seen: dict[str, tuple[int, ...]] = {}
    real = simulation.get_policy

    def spying(name: str) -> Callable[[Snapshot], Decisions]:
        policy = real(name)

        def decide(snap: Snapshot) -> Decisions:
            decisions = policy(snap)
            seen.update((g.lease_id, g.gpu_ids) for g in decisions.grants)
            return decisions
        return decide

    monkeypatch.setattr(simulation, "get_policy", spying)
    return seen


def test_the_live_fleet_is_the_engines_view_of_the_pool(mixed: dict[str, Any]) -> None:
    live = live_fleet("mixed")
    views = {g.id: g for g in live.config.gpus}
    assert {g.pk for g in mixed["in"]} == {i for i, g in views.items() if g.schedulable}
    assert not any(views[g.pk].schedulable for g in mixed["out"] + mixed["parent"])
    assert {g.pool for g in views.values()} == {"mixed"}  # the other pool's GPUs are not in it
    assert sum(g.time_sliced for g in views.values()) == 12 and sum(bool(g.mig_profile) for g in views.values()) == 3
    assert live.fleet == {
        "kc": {"kind": "kubernetes", "hosts": 2, "gpus": 12, "models": {H100: 4, T4: 8}, "mig_slices": 0,
               "time_sliced": 8, "out_of_service": 9},
        "vm": {"kind": "ssh", "hosts": 3, "gpus": 10, "models": {A100: 6, L4: 4}, "mig_slices": 3,
               "time_sliced": 4, "out_of_service": 5}}
    # Teams, quotas and classes are the database's.
    assert live.config.teams == {"a": 2.0, "b": 1.0}
    assert live.config.quotas[("a", "mixed")].guaranteed == 4
    assert live.config.priority_classes["best-effort"].preemptible


def test_the_replay_places_jobs_only_on_gpus_in_service(mixed: dict[str, Any],
                                                        grants: dict[str, tuple[int, ...]], tmp_path: Path) -> None:
    rows = [f"{i * 10},{'ab'[i % 2]},1,300,default," for i in range(30)]
    rows += ["5,a,4,100,high,H100",   # node-a: its 4 GPUs in service
             "6,b,8,100,default,H100",  # only node-b (cordoned) has 8, and 4 H100 are in service
             "7,a,5,100,default,A100",  # 3 whole A100 in service; vm-1 (offline) would have made 7
             "8,b,4,50,default,L4",     # the time-sliced replicas of vm-3
             "9,a,8,50,best-effort,T4"]  # node-c's replicas
    result = _simulate("--fleet", "live", "--pool", "mixed", _trace(tmp_path, rows))
    assert result["jobs"] == 35
    assert result["unplaceable"] == 2
    assert 0 < result["utilization"] <= 1 and result["quota_violations"] == 0
    assert set(result["teams"]) == {"a", "b"}
    assert set(result["fleet"]) == {"vm", "kc"}
    assert result["fleet"]["vm"]["gpus"] + result["fleet"]["kc"]["gpus"] == 22
    granted = {gpu for grant in grants.values() for gpu in grant}
    assert len(grants) == 33  # every job that could be placed, once (nothing contends for long)
    assert granted <= {g.pk for g in mixed["in"]}
    assert granted.isdisjoint(g.pk for g in mixed["out"] + mixed["parent"])
    assert granted & {g.pk for g in mixed["in"] if g.shared_replicas > 1}  # replicas are used


def test_the_trace_may_be_given_with_trace_and_a_config_replaces_the_databases_settings(
        mixed: dict[str, Any], tmp_path: Path) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text("teams: [{name: x, weight: 3}]\n"
                      "quotas: [{team: x, pool: mixed, guaranteed: 10}]\n"
                      "priority_classes: [{name: default, value: 0}]\n")
    trace = _trace(tmp_path, ["0,x,2,100,default,", "0,y,2,100,,"])
    result = _simulate("--fleet", "live", "--pool", "mixed", "--config", str(config), trace=trace)
    assert set(result["teams"]) == {"x", "y"}  # the config's team, and the trace's own (weight 1)
    assert result["jobs"] == 2 and result["unplaceable"] == 0
    with pytest.raises(CommandError, match="unknown priority class 'high'"):
        _simulate("--fleet", "live", "--pool", "mixed", "--config", str(config),
                  _trace(tmp_path, ["0,x,2,100,high,"]))


def test_jobs_go_where_their_binding_and_source_can_run(mixed: dict[str, Any], grants: dict[str, tuple[int, ...]],
                                                        tmp_path: Path) -> None:
    """`binding` keeps a job on hosts whose source starts that workload (ssh: process, kubernetes:
    pod) and `source` on that source's hosts, as for a lease: a job that only the other kind of
    host could hold is unplaceable."""
    header = "submit_s,team,gpus,duration_s,priority_class,model,util_pct,binding,source"
    rows = ["0,a,2,100,,,,process,",    # job-0: vm
            "0,b,2,100,,,,pod,",        # job-1: kc
            "0,a,1,100,,,,,kc",         # job-2: kc
            "0,b,1,100,,,,,vm",         # job-3: vm
            "0,a,4,100,,H100,,pod,kc",  # job-4: node-a
            "0,a,4,100,,H100,,process,",  # the H100 are all in the cluster: unplaceable
            "0,b,4,100,,L4,,pod,",      # the L4 replicas are on an ssh host: unplaceable
            "0,a,2,100,,T4,,,vm"]       # the T4 are in the cluster: unplaceable
    result = _simulate("--fleet", "live", "--pool", "mixed", _trace(tmp_path, rows, header))
    assert result["jobs"] == 8 and result["unplaceable"] == 3
    source = dict(Gpu.objects.values_list("pk", "host__source__name"))
    where = {lease: {source[g] for g in gpus} for lease, gpus in grants.items()}
    assert where == {"job-0": {"vm"}, "job-1": {"kc"}, "job-2": {"kc"}, "job-3": {"vm"}, "job-4": {"kc"}}
    assert {Gpu.objects.get(pk=g).host.name for g in grants["job-4"]} == {"node-a"}


def test_two_clusters_with_a_node_of_the_same_name_are_two_hosts(apply_yaml: Callable[..., Any],
                                                                  grants: dict[str, tuple[int, ...]],
                                                                  tmp_path: Path) -> None:
    """A lease never spans two clusters, and their same-named nodes are not one host of 8."""
    apply_yaml(SETTINGS, discover=False)
    pool = Pool.objects.get(name="mixed")
    for name in ("ka", "kb"):
        _gpus(_host(Source.objects.create(name=name, kind="kubernetes", pool=pool), "gpu-1"), 4, H100)
    result = _simulate("--fleet", "live", "--pool", "mixed",
                       _trace(tmp_path, ["0,a,8,100,,", "0,a,4,100,,", "0,b,4,100,,"]))
    assert result["unplaceable"] == 1 and set(grants) == {"job-1", "job-2"}
    assert {s: (f["hosts"], f["gpus"]) for s, f in result["fleet"].items()} == {"ka": (1, 4), "kb": (1, 4)}


def test_binding_and_source_columns_are_checked(mixed: dict[str, Any], tmp_path: Path) -> None:
    header = "submit_s,team,gpus,duration_s,priority_class,model,util_pct,binding,source"
    with pytest.raises(CommandError, match=r"trace line 2: unknown source 'kz' \(the fleet's: kc, vm\)"):
        _simulate("--fleet", "live", "--pool", "mixed", _trace(tmp_path, ["0,a,1,100,,,,pod,kz"], header))
    with pytest.raises(CommandError, match=r"trace.csv:2: binding must be process or pod or empty, got 'vm'"):
        _simulate("--fleet", "live", "--pool", "mixed", _trace(tmp_path, ["0,a,1,100,,,,vm,"], header))


def test_bad_pools_and_arguments_are_refused_saying_why(mixed: dict[str, Any], tmp_path: Path) -> None:
    trace = _trace(tmp_path, ["0,a,1,100,,"])
    with pytest.raises(CommandError, match=r"unknown pool 'nope' \(known pools: empty, mixed, other\)"):
        _simulate("--fleet", "live", "--pool", "nope", trace)
    with pytest.raises(CommandError, match="pool 'empty' has no GPUs"):
        _simulate("--fleet", "live", "--pool", "empty", trace)
    Host.objects.filter(name="far-0").update(state=HostState.OFFLINE)
    with pytest.raises(CommandError, match="pool 'other' has 8 GPUs but none in service"):
        _simulate("--fleet", "live", "--pool", "other", trace)
    with pytest.raises(CommandError, match="--fleet live needs --pool"):
        _simulate("--fleet", "live", trace)
    with pytest.raises(CommandError, match="--pool names a live pool"):
        _simulate("--pool", "mixed", trace)
    with pytest.raises(CommandError, match="a trace is required"):
        _simulate("--fleet", "live", "--pool", "mixed")
    with pytest.raises(CommandError, match="two traces given"):
        _simulate("--fleet", "live", "--pool", "mixed", trace, trace=str(tmp_path / "other.csv"))
    with pytest.raises(CommandError, match="No such file"):
        _simulate("--fleet", "live", "--pool", "mixed", str(tmp_path / "missing.csv"))


@pytest.mark.skipif(not (TRACES / "openb_node_list_gpu_node.csv").exists(),
                    reason=f"the Alibaba openb trace is not in {TRACES} (README, 'Simulating a trace')")
def test_the_real_trace_replays_on_a_live_built_pool(apply_yaml: Callable[..., Any], tmp_path: Path) -> None:
    """1/100 of the openb nodes of each (model, GPUs per node) group, as `bench_simulate.py` shrinks
    the fleet so that the trace contends, made rows of one pool: the public models behind ssh,
    the internal G1-G3 codes and the A10 in a cluster. The whole trace replays on it."""
    import csv
    from collections import defaultdict

    apply_yaml("pools: [{name: openb}]\n"
               "teams: [{name: team-0}, {name: team-1}, {name: team-2}, {name: team-3}]\n"
               "priority_classes: [{name: high, value: 100}, {name: default, value: 0},\n"
               "  {name: best-effort, value: -10, preemptible: true, min_runtime_s: 300, grace_s: 30}]\n",
               discover=False)
    pool = Pool.objects.get(name="openb")
    sources = {"ssh": Source.objects.create(name="openb-vm", kind="ssh", pool=pool),
               "kubernetes": Source.objects.create(name="openb-k8s", kind="kubernetes", pool=pool)}
    groups: dict[tuple[str, int], list[str]] = defaultdict(list)
    with open(TRACES / "openb_node_list_gpu_node.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            if int(row["gpu"] or 0) > 0:
                groups[(row["model"], int(row["gpu"]))].append(row["sn"])
    nodes = [(name, model, size) for (model, size), names in sorted(groups.items())
             for name in names[:round(len(names) / 100)]]
    hosts = Host.objects.bulk_create(
        Host(source=sources["kubernetes" if model[0] in "GA" else "ssh"], name=name) for name, model, _ in nodes)
    Gpu.objects.bulk_create(Gpu(uuid=f"{name}-gpu-{i}", host=host, pool=pool, index=i, model=model)
                            for host, (name, model, size) in zip(hosts, nodes, strict=True) for i in range(size))
    jobs, _ = convert_alibaba(TRACES / "openb_pod_list_default.csv", TRACES / "openb_node_list_gpu_node.csv")
    write_trace(tmp_path / "openb.csv", jobs)

    result = _simulate("--fleet", "live", "--pool", "openb", str(tmp_path / "openb.csv"))
    assert result["jobs"] == len(jobs) == 6203
    assert 0 < result["utilization"] <= 1
    assert sum(s["gpus"] for s in result["fleet"].values()) == sum(size for _, _, size in nodes) == 50
    assert sum(s["hosts"] for s in result["fleet"].values()) == len(nodes)
    assert {s["kind"] for s in result["fleet"].values()} == {"ssh", "kubernetes"}
    assert result["quota_violations"] == 0
    assert 0 <= result["wait_s"]["p50"] <= result["wait_s"]["p95"] <= result["wait_s"]["max"]
    assert 0 < result["jain_index"] <= 1


def test_a_discovered_simulated_fleet_replays_as_its_config_does(apply_yaml: Callable[..., Any]) -> None:
    """examples/traces/sim.yaml applied and discovered (its simulated sources become rows), then
    replayed live: the policy sees the config's fleet, GPU for GPU, and decides as it does on the
    config's fleet listed in the engine's order (by host name; ties between equal GPUs are broken
    by that order, so the config's own order may decide a tie otherwise)."""
    examples = ROOT / "examples" / "traces"
    apply_yaml((examples / "sim.yaml").read_text())
    trace = examples / "small.csv"
    cfg = load_sim_config(examples / "sim.yaml")
    live = live_fleet("training").config

    def facts(gpus: tuple[GpuView, ...]) -> list[tuple[Any, ...]]:
        return sorted(astuple(replace(g, id=0)) for g in gpus)
    assert facts(live.gpus) == facts(cfg.gpus)
    assert (live.teams, live.quotas, live.priority_classes, live.half_life_s, live.pools) == \
        (cfg.teams, cfg.quotas, cfg.priority_classes, cfg.half_life_s, cfg.pools)

    result = _simulate("--fleet", "live", "--pool", "training", str(trace))
    assert result.pop("fleet") == {
        "a100": {"kind": "simulated", "hosts": 8, "gpus": 32, "models": {A100: 32}, "mig_slices": 0,
                 "time_sliced": 0, "out_of_service": 0},
        "h100": {"kind": "simulated", "hosts": 24, "gpus": 192, "models": {H100: 192}, "mig_slices": 0,
                 "time_sliced": 0, "out_of_service": 0}}
    engine_order = tuple(replace(g, id=i + 1) for i, g in enumerate(sorted(cfg.gpus, key=lambda g: g.host)))
    expected = simulate(load_trace(trace), engine_order, cfg.teams, cfg.quotas, cfg.priority_classes,
                        cfg.half_life_s, pools=cfg.pools)
    result.pop("wall_s"), expected.pop("wall_s")
    assert result == expected and result["preemptions"] > 0
