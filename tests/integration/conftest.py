"""Integration fixtures: the real sshd and fake GPU hosts of the agent tests, a Kubernetes API."""

from collections.abc import Iterator

import pytest

from tests.agents.conftest import fake_host, nvidia_smi_fleets, ssh_config, ssh_server  # noqa: F401
from tests.support.kube import running_kube_api
from tests.support.kube_server import KubeApiServer


@pytest.fixture
def kube_api() -> Iterator[KubeApiServer]:
    with running_kube_api() as server:
        yield server
