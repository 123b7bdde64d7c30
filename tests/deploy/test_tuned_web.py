"""Every start of the web server runs the tuned configuration (pool/gunicorn_conf.py): `make run`,
the image, docker compose, the Helm chart and the test and benchmark stacks; the chart turns the
fast lease path, persistent connections and prepared statements on by default."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import yaml

from stacktools.processes import web_command
from tests.deploy.chart import RELEASE, REPO, containers, named, rendered, workloads

CONFIG = ["-c", "python:pool.gunicorn_conf"]
FULLNAME = f"{RELEASE}-gpupool"


def _uses_config(argv: list[str]) -> bool:
    return any(argv[i:i + 2] == CONFIG for i in range(len(argv)))


def test_every_start_reads_the_tuned_configuration() -> None:
    assert _uses_config(web_command(8000))
    assert "-c python:pool.gunicorn_conf pool.asgi:application" in (REPO / "scripts" / "run.sh").read_text()
    assert '"-c", "python:pool.gunicorn_conf"' in (REPO / "Dockerfile").read_text()
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    assert _uses_config(compose["web"]["command"])


def test_the_chart_starts_the_tuned_configuration_by_default() -> None:
    manifests = rendered("minimal")
    assert _uses_config(next(containers(workloads(manifests)["web"]))["command"])
    settings = named(manifests, "ConfigMap", FULLNAME)["data"]
    assert settings["GPUPOOL_LEASE_FAST_PATH"] == "1"
    assert settings["GPUPOOL_DB_PREPARE"] == "1"
    assert int(settings["DB_CONN_MAX_AGE"]) > 0
    assert settings["GPUPOOL_WEB_WORKERS"] == "3"


@pytest.mark.parametrize(("configured", "expected"), [("5", 5), ("", None)])
def test_workers_come_from_the_environment_or_the_cores(monkeypatch: Any, configured: str,
                                                        expected: int | None) -> None:
    import os

    monkeypatch.setenv("GPUPOOL_WEB_WORKERS", configured)
    conf = importlib.reload(importlib.import_module("pool.gunicorn_conf"))
    assert conf.workers == (expected if expected is not None else min(8, max(2, os.cpu_count() or 2)))
    assert conf.worker_class == "uvicorn_worker.UvicornWorker" and conf.keepalive > 0


def test_the_web_entry_point_imports_what_requests_would_import_at_once() -> None:
    """Request threads importing the engine's cycle at once saw a module half-made (an HTTP 500 on
    a busy start): the entry point imports the URLconf's views and the pass task before serving."""
    import subprocess
    import sys

    wanted = ["allocation.tasks", "allocation.engine.snapshot", "allocation.api.fleet", "pool.api.urls"]
    code = ("import sys, pool.asgi; "
            f"print(','.join(m for m in {wanted!r} if m not in sys.modules) or 'all')")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "all"
