"""The Helm chart renders, lints clean, and every manifest is valid Kubernetes for both value sets;
its processes are those of docker-compose.yml, and its settings reach them as the app reads them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.deploy.chart import (
    CHART,
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    REPO,
    SECRET_SETTINGS,
    VALUE_SETS,
    containers,
    helm,
    hook,
    named,
    of_kind,
    render,
    rendered,
    values,
    workloads,
)

FULLNAME = f"{RELEASE}-gpupool"


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_the_chart_lints_without_warnings(value_set: str) -> None:
    report = helm().lint(str(CHART), values(value_set), strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_manifest_is_valid_against_the_kubernetes_schema(value_set: str, kube_version: str) -> None:
    manifests = rendered(value_set)
    assert len(manifests) >= 12
    for manifest in manifests:
        where = f"{manifest['kind']}/{manifest['metadata']['name']}"
        try:
            kubernetes_validate.validate(manifest, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{value_set} {where} is invalid for Kubernetes {kube_version}: {exc.message}")


def test_both_value_sets_render_the_processes_and_the_production_set_its_extras() -> None:
    minimal, production = rendered("minimal"), rendered("production")
    assert set(workloads(minimal)) == set(workloads(production)) == {"web", "worker", "scheduler", "beat", "migrate"}
    assert not of_kind(minimal, "NetworkPolicy") and not of_kind(minimal, "PodDisruptionBudget")
    assert {m["kind"] for m in production} >= {"NetworkPolicy", "PodDisruptionBudget", "HorizontalPodAutoscaler",
                                               "Ingress"}
    deployments = {d["metadata"]["name"]: d for d in of_kind(production, "Deployment")}
    assert f"{FULLNAME}-worker" in deployments and deployments[f"{FULLNAME}-worker"]["spec"]["replicas"] == 2
    # Autoscaled web: the HPA owns the replica count, so the Deployment does not fight it.
    assert "replicas" not in deployments[f"{FULLNAME}-web"]["spec"]
    hpa = named(production, "HorizontalPodAutoscaler", f"{FULLNAME}-web")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"{FULLNAME}-web"}
    assert hpa["spec"]["minReplicas"] == 2


def test_the_processes_run_the_commands_of_docker_compose() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    commands = {name: next(containers(w))["command"] for name, w in workloads(rendered("minimal")).items()}
    assert commands["migrate"] == compose["migrate"]["command"]
    for name in ("worker", "scheduler"):
        queue = compose[name]["command"][compose[name]["command"].index("-Q") + 1]
        assert commands[name][:4] == ["celery", "-A", "pool", "worker"]
        assert commands[name][commands[name].index("-Q") + 1] == queue
    assert commands["beat"][:4] == compose["beat"]["command"][:4] == ["celery", "-A", "pool", "beat"]
    assert commands["web"][:4] == compose["web"]["command"][:4]
    assert commands["web"][commands["web"].index("--bind") + 1] == "0.0.0.0:8000"


def test_migrations_run_in_a_pre_install_and_pre_upgrade_hook_after_the_settings_exist() -> None:
    manifests = rendered("minimal")
    job = named(manifests, "Job", f"{FULLNAME}-migrate")
    assert hook(job) == {"pre-install", "pre-upgrade"}
    assert next(containers(job))["command"] == ["python", "manage.py", "migrate", "--no-input"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] > 0
    # The Job reads the ConfigMap and the Secret: they are hooks too, created before it (lower weight).
    weight = int(job["metadata"]["annotations"]["helm.sh/hook-weight"])
    for kind in ("ConfigMap", "Secret"):
        settings = named(manifests, kind, FULLNAME)
        assert hook(settings) == {"pre-install", "pre-upgrade"}
        assert int(settings["metadata"]["annotations"]["helm.sh/hook-weight"]) < weight
    # Only the settings and the Job are hooks: every other object is an ordinary release resource.
    hooks = {(m["kind"], m["metadata"]["name"]) for m in manifests if hook(m)}
    assert hooks == {("Job", f"{FULLNAME}-migrate"), ("ConfigMap", FULLNAME), ("Secret", FULLNAME)}


def test_no_secret_is_in_a_configmap_or_an_environment_variable() -> None:
    secrets = values("minimal")
    secret_values = [secrets["secretKey"], secrets["fernetKey"], secrets["postgresql"]["external"]["url"],
                     secrets["redis"]["external"]["url"]]
    for manifest in rendered("minimal"):
        if manifest["kind"] == "Secret":
            assert sorted(manifest["stringData"]) == sorted(SECRET_SETTINGS)
            continue
        text = json.dumps(manifest)
        assert not [v for v in secret_values if v in text], f"{manifest['kind']} {manifest['metadata']['name']}"
    configmap = named(rendered("minimal"), "ConfigMap", FULLNAME)
    assert not set(configmap["data"]) & set(SECRET_SETTINGS)
    # Asking for a secret through the plain `env` map is refused, naming the setting.
    with pytest.raises(helm().HelmRenderError, match=re.escape("env.DATABASE_URL is a secret setting")):
        render({**values("minimal"), "env": {"DATABASE_URL": "postgres://x"}})


def test_secrets_reach_every_process_as_files_from_the_release_or_the_existing_secret() -> None:
    for value_set, secret_name in (("minimal", FULLNAME), ("production", "gpupool-settings")):
        manifests = rendered(value_set)
        assert bool(of_kind(manifests, "Secret")) == (value_set == "minimal")
        for name, workload in workloads(manifests).items():
            pod = workload["spec"]["template"]["spec"]
            container = next(containers(workload))
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert not set(env) & set(SECRET_SETTINGS), name
            secret_volume = next(v for v in pod["volumes"] if v["name"] == "secrets")["secret"]
            assert secret_volume["secretName"] == secret_name
            mount = next(m for m in container["volumeMounts"] if m["name"] == "secrets")
            assert mount["readOnly"] is True
            assert {i["key"] for i in secret_volume["items"]} == set(SECRET_SETTINGS)
            for key in SECRET_SETTINGS:
                assert env[f"{key}_FILE"] == f"{mount['mountPath']}/{key}"
            assert container["envFrom"] == [{"configMapRef": {"name": FULLNAME}}]


@pytest.mark.parametrize("missing", ["secretKey", "fernetKey", "postgresql.external.url", "redis.external.url"])
def test_an_install_without_a_secret_setting_fails_naming_it(missing: str) -> None:
    chosen = values("minimal")
    *parents, leaf = missing.split(".")
    node = chosen
    for key in parents:
        node = node[key]
    del node[leaf]
    with pytest.raises(helm().HelmRenderError, match=re.escape(f"{missing} is required")):
        render(chosen)


def test_the_app_reads_the_rendered_settings_as_the_pods_give_them(tmp_path: Path) -> None:
    """Load pool.settings in a fresh process with the pods' environment and secret files."""
    manifests = rendered("minimal")
    web = workloads(manifests)["web"]
    container = next(containers(web))
    secret_dir = tmp_path / "secrets"
    secret_dir.mkdir()
    for key, value in named(manifests, "Secret", FULLNAME)["stringData"].items():
        (secret_dir / key).write_text(value + "\n")  # kubelet writes the bytes as given; strip must cope
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH")}
    env.update(named(manifests, "ConfigMap", FULLNAME)["data"])
    env.update({e["name"]: e["value"].replace("/etc/gpupool/secrets", str(secret_dir)) for e in container["env"]})
    env["GPUPOOL_VAR_DIR"] = str(tmp_path / "var")  # the emptyDir at /var/lib/gpupool in the pod
    probe_host = container["readinessProbe"]["httpGet"]["httpHeaders"][0]["value"]
    # The probes' requests, made in that process: the database host does not resolve here, so an
    # accepted Host header gets /healthz's 503 (readiness), a refused one (a pod IP) gets 400, and
    # the liveness probe (no database check) 200.
    script = ("import django, json; django.setup(); from django.conf import settings as s; "
              "from django.test import Client; c = Client(raise_request_exception=False); "
              f"probe = c.get({container['readinessProbe']['httpGet']['path']!r}, HTTP_HOST={probe_host!r}); "
              "pod_ip = c.get('/healthz', HTTP_HOST='10.1.2.3:8000'); "
              f"live = c.get({container['livenessProbe']['httpGet']['path']!r}, HTTP_HOST={probe_host!r}); "
              "print(json.dumps([s.SECRET_KEY, s.GPUPOOL['FERNET_KEY'], s.DATABASES['default']['HOST'], "
              "s.CELERY_BROKER_URL, s.ALLOWED_HOSTS, probe.status_code, probe.json(), pod_ip.status_code, "
              "live.status_code]))")
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    secret_key, fernet_key, db_host, broker, allowed, probe, body, pod_ip, live = json.loads(
        out.strip().splitlines()[-1])
    chosen = values("minimal")
    assert (secret_key, fernet_key) == (chosen["secretKey"], chosen["fernetKey"])
    assert db_host == "postgres.example.internal" and broker == chosen["redis"]["external"]["url"]
    assert probe_host in allowed and f"{probe_host}.{NAMESPACE}.svc" in allowed
    assert (probe, body["status"], pod_ip) == (503, "unavailable", 400)
    assert live == 200  # the liveness probe does not restart a pod for a database outage
    # The app writes only under GPUPOOL_VAR_DIR: the pods mount an emptyDir there.
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {env_var_dir(manifests), "/tmp"}


def env_var_dir(manifests: list[dict[str, object]]) -> str:
    data = named(manifests, "ConfigMap", FULLNAME)["data"]
    assert isinstance(data, dict)
    return str(data["GPUPOOL_VAR_DIR"])
