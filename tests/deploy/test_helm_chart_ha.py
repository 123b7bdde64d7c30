"""The chart for high availability: several replicas of every process spread over nodes, a
disruption budget each, beats that elect one leader, probes that restart only a stuck process, and
PostgreSQL and Redis reached as HA clusters (a multi-host DATABASE_URL, a Sentinel group)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from celery.beat import Scheduler
from celery.utils.imports import symbol_by_name
from django.conf import settings

from core import liveness
from tests.deploy.chart import (
    RELEASE,
    REPO,
    containers,
    helm,
    named,
    of_kind,
    render,
    rendered,
    values,
    workloads,
)

FULLNAME = f"{RELEASE}-gpupool"
CELERY = ("worker", "scheduler", "beat")
REPLICATED = ("web", *CELERY)


def test_the_ha_set_runs_several_replicas_of_every_process_spread_over_nodes() -> None:
    manifests = rendered("ha")
    deployments = {name: w for name, w in workloads(manifests).items() if w["kind"] == "Deployment"}
    assert {name: d["spec"]["replicas"] for name, d in deployments.items()} == {
        "web": 3, "worker": 2, "scheduler": 2, "beat": 2}
    for name, deployment in deployments.items():
        [spread] = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "DoNotSchedule"
        assert spread["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"], name
    # By default a preference, over nodes and zones; the migration Job is never spread.
    for name, workload in workloads(rendered("minimal")).items():
        spreads = workload["spec"]["template"]["spec"].get("topologySpreadConstraints", [])
        assert [(s["topologyKey"], s["whenUnsatisfiable"]) for s in spreads] == (
            [] if name == "migrate" else [("kubernetes.io/hostname", "ScheduleAnyway"),
                                          ("topology.kubernetes.io/zone", "ScheduleAnyway")]), name


def test_a_component_s_own_spread_replaces_the_chart_s() -> None:
    own = [{"maxSkew": 2, "topologyKey": "example.org/rack", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "web"}}}]
    manifests = render({**values("minimal"), "web": {"topologySpreadConstraints": own}})
    assert workloads(manifests)["web"]["spec"]["template"]["spec"]["topologySpreadConstraints"] == own
    off = render({**values("minimal"), "topologySpread": {"enabled": False}})
    assert not any("topologySpreadConstraints" in w["spec"]["template"]["spec"] for w in workloads(off).values())


def test_every_replicated_process_has_a_disruption_budget_that_never_blocks_a_drain() -> None:
    manifests = rendered("ha")
    budgets = {b["metadata"]["labels"]["app.kubernetes.io/component"]: b["spec"]
               for b in of_kind(manifests, "PodDisruptionBudget")}
    assert set(budgets) == set(REPLICATED)
    for name, spec in budgets.items():
        assert spec == {"maxUnavailable": 1, "selector": workloads(manifests)[name]["spec"]["selector"]}


def test_beats_elect_one_leader_and_an_upgrade_starts_the_new_beat_before_stopping_the_old() -> None:
    """Several beat pods are safe only because the scheduler elects a leader (core/beat.py): the
    pods must run it (the setting, not overridden on the command line) and keep no state file."""
    scheduler = symbol_by_name(settings.CELERY_BEAT_SCHEDULER)
    assert settings.CELERY_BEAT_SCHEDULER == "core.beat:LeaderScheduler" and issubclass(scheduler, Scheduler)
    for value_set, replicas in (("minimal", 1), ("ha", 2)):
        beat = workloads(rendered(value_set))["beat"]
        assert beat["spec"]["replicas"] == replicas
        assert beat["spec"]["strategy"] == {"type": "RollingUpdate",
                                            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
        command = next(containers(beat))["command"]
        assert command[:4] == ["celery", "-A", "pool", "beat"]
        assert not {"-S", "--scheduler", "-s", "--schedule"} & set(command)


def test_celery_processes_are_probed_by_their_heartbeat_and_the_probe_runs(tmp_path: Path) -> None:
    manifests = rendered("ha")
    for name in CELERY:
        container = next(containers(workloads(manifests)[name]))
        env = {e["name"]: e.get("value") for e in container["env"]}
        alive = env[liveness.ENV]
        assert any(alive.startswith(m["mountPath"] + "/") for m in container["volumeMounts"] if m["name"] == "tmp")
        for kind in ("livenessProbe", "startupProbe"):
            probe = container[kind]
            assert probe["exec"]["command"] == ["python", "-m", "core.liveness", "--max-age", "60"], (name, kind)
            assert probe["timeoutSeconds"] >= 5  # a Python start on a busy node
    # The command as the kubelet runs it, on a heartbeat file as the process leaves it.
    command = next(containers(workloads(manifests)["beat"]))["livenessProbe"]["exec"]["command"]
    heartbeat = tmp_path / "alive"
    heartbeat.touch()
    done = subprocess.run([sys.executable, *command[1:]], cwd=REPO, env={**os.environ, liveness.ENV: str(heartbeat)},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    # Off: no probe, no heartbeat file named.
    off = render({**values("minimal"), "celeryLiveness": {"enabled": False}})
    for name in CELERY:
        container = next(containers(workloads(off)[name]))
        assert "livenessProbe" not in container and liveness.ENV not in str(container["env"])


def test_a_sentinel_group_replaces_redis_url_and_its_passwords_stay_secret() -> None:
    manifests = rendered("ha")
    data = named(manifests, "ConfigMap", FULLNAME)["data"]
    assert data["REDIS_SENTINELS"] == ",".join(values("ha")["redis"]["sentinel"]["hosts"])
    assert (data["REDIS_MASTER_NAME"], data["REDIS_DB"]) == ("gpupool", "0")
    secret = named(manifests, "Secret", FULLNAME)["stringData"]
    # The app refuses REDIS_URL beside REDIS_SENTINELS: the pods are not given one.
    assert "REDIS_URL" not in secret and secret["REDIS_PASSWORD"] == "redis-password-in-secret"
    assert "redis-password-in-secret" not in str(data)
    for name, workload in workloads(manifests).items():
        env = {e["name"] for e in next(containers(workload))["env"]}
        assert "REDIS_PASSWORD_FILE" in env and "REDIS_URL_FILE" not in env, name
    # NetworkPolicy lets every process reach the sentinels, as well as the Redis servers.
    for policy in of_kind(manifests, "NetworkPolicy"):
        ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
        assert {26379, 6379, 5432} <= ports, policy["metadata"]["name"]


def test_a_sentinel_group_with_an_existing_secret_mounts_the_keys_it_names() -> None:
    chosen = {"existingSecret": "gpupool-settings",
              "redis": {"sentinel": {"hosts": ["s1:26379"], "existingSecretKeys": ["REDIS_SENTINEL_PASSWORD"]}}}
    manifests = render(chosen)
    assert not of_kind(manifests, "Secret")
    volume = next(v for v in workloads(manifests)["web"]["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == "secrets")
    assert [i["key"] for i in volume["secret"]["items"]] == [
        "SECRET_KEY", "GPUPOOL_FERNET_KEY", "DATABASE_URL", "REDIS_SENTINEL_PASSWORD"]
    with pytest.raises(helm().HelmRenderError, match=re.escape("REDIS_URL is not REDIS_PASSWORD")):
        render({**chosen, "redis": {"sentinel": {"hosts": ["s1"], "existingSecretKeys": ["REDIS_URL"]}}})
    with pytest.raises(helm().HelmRenderError, match=re.escape("env.REDIS_PASSWORD is a secret setting")):
        render({**chosen, "env": {"REDIS_PASSWORD": "x"}})


def test_a_patroni_cluster_is_one_multi_host_database_url_kept_in_the_secret() -> None:
    url = values("ha")["postgresql"]["external"]["url"]
    assert url.count(":5432") == 3 and "target_session_attrs=read-write" in url
    assert named(rendered("ha"), "Secret", FULLNAME)["stringData"]["DATABASE_URL"] == url
