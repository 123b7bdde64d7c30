"""docker-compose.yml and the Dockerfile describe the production topology the settings expect."""

import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def test_compose_runs_postgres_redis_web_worker_and_beat_from_one_image() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "web", "worker", "beat"} <= set(services)
    for name in ("web", "worker", "beat", "migrate"):
        env = services[name]["environment"]
        assert env["DATABASE_URL"].startswith("postgres://") and env["REDIS_URL"].startswith("redis://")
        assert services[name]["env_file"] == ".env"
    assert services["worker"]["command"][:4] == ["celery", "-A", "pool", "worker"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "pool", "beat"]
    assert "pool.asgi:application" in services["web"]["command"]
    assert "uvicorn_worker.UvicornWorker" in services["web"]["command"]
    assert services["scheduler"]["command"][:4] == ["celery", "-A", "pool", "worker"]
    assert "gpupool.schedule" in services["scheduler"]["command"]
    assert services["web"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_env_example_names_every_production_setting() -> None:
    names = {line.split("=", 1)[0] for line in (REPO / ".env.example").read_text().splitlines()
             if line and not line.startswith("#")}
    assert {"SECRET_KEY", "GPUPOOL_FERNET_KEY", "ALLOWED_HOSTS", "POSTGRES_PASSWORD"} <= names


def test_the_dockerfile_copies_every_package_the_project_installs() -> None:
    """Derived from pyproject's package list: a new app the image lacks fails here, not in a pod."""
    dockerfile = (REPO / "Dockerfile").read_text()
    found = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = [pattern.removesuffix("*") for pattern in found["include"]]
    assert {"core", "pool", "history"} <= set(packages)
    for package in packages:
        assert f"COPY {package} ./{package}" in dockerfile
    assert "COPY cli ./cli" in dockerfile
    assert "pip install --no-cache-dir ./cli ." in dockerfile  # the client's distribution first
