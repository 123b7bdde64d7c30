"""Render the Helm chart the way `helm template` does, and look up what the tests assert on.

Rendering uses Helm's own Go SDK through `helm-python-sdk` (a native library bundled in the
wheel, so no `helm` binary and no cluster are needed). Where that wheel cannot be installed the
chart tests skip and say why.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpupool"
RELEASE = "gp"
NAMESPACE = "gpupool"
#: The value sets every manifest is validated for (chart-testing's convention: ci/*-values.yaml).
VALUE_SETS = ("minimal", "production", "ha")
#: The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest schema known.
KUBE_VERSIONS = ("1.25.0", "1.37.0")
SECRET_SETTINGS = ("SECRET_KEY", "GPUPOOL_FERNET_KEY", "DATABASE_URL", "REDIS_URL")

Manifest = dict[str, Any]


def helm() -> Any:
    return pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's Go SDK) is not installed here")


def values(value_set: str) -> dict[str, Any]:
    """The values of `ci/<value_set>-values.yaml`."""
    loaded: dict[str, Any] = yaml.safe_load((CHART / "ci" / f"{value_set}-values.yaml").read_text())
    return loaded


def render(overrides: dict[str, Any] | None = None) -> list[Manifest]:
    """Every manifest of an install with these values (NOTES.txt left out), in template order.

    Raises the SDK's HelmRenderError when a template fails (a `required` value is missing).
    """
    with helm().Chart.load(str(CHART)) as chart:
        rendered = chart.render(overrides or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    manifests: list[Manifest] = []
    for path in sorted(rendered):
        if path.endswith(".yaml"):
            manifests.extend(doc for doc in yaml.safe_load_all(rendered[path]) if doc)
    return manifests


@cache
def _rendered_set(value_set: str) -> tuple[Manifest, ...]:
    return tuple(render(values(value_set)))


def rendered(value_set: str) -> list[Manifest]:
    """The manifests of one value set (rendered once per test session; callers get copies)."""
    return yaml.safe_load(yaml.safe_dump(list(_rendered_set(value_set))))


def of_kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in manifests if m["kind"] == kind]


def named(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    matches = [m for m in of_kind(manifests, kind) if m["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def component(manifest: Manifest) -> str:
    return str(manifest["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"])


def workloads(manifests: list[Manifest]) -> dict[str, Manifest]:
    """The Deployments and the Job, by the component their pods run."""
    return {component(m): m for m in manifests if m["kind"] in ("Deployment", "Job")}


def containers(workload: Manifest) -> Iterator[dict[str, Any]]:
    yield from workload["spec"]["template"]["spec"]["containers"]


def hook(manifest: Manifest) -> set[str]:
    """The Helm hooks a manifest runs as ({} when it is an ordinary release resource)."""
    annotation = (manifest["metadata"].get("annotations") or {}).get("helm.sh/hook", "")
    return {part.strip() for part in annotation.split(",") if part.strip()}
