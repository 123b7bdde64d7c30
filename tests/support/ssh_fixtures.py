"""Fixtures of the SSH tests (agents, integration): one real sshd per test session, fleets of fake
GPU hosts. Registered once for the whole suite (tests/conftest.py, `pytest_plugins`).

The sshd tests skip, saying why, when /usr/sbin/sshd is absent; nothing else here needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.sshd import FakeHost, SshServer, sshd_or_skip, write_fleets


@pytest.fixture(scope="session")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    with sshd_or_skip(tmp_path_factory.mktemp("sshd")) as server:
        yield server


@pytest.fixture(scope="session")
def nvidia_smi_fleets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fleets(tmp_path_factory.mktemp("fleets"))


@pytest.fixture
def fake_host(tmp_path: Path, nvidia_smi_fleets: Path) -> FakeHost:
    """A host whose nvidia-smi prints the `titanx` fleet until `use()` picks another."""
    host = FakeHost(tmp_path / "host-bin", nvidia_smi_fleets)
    host.use("titanx")
    return host


@pytest.fixture
def ssh_config(ssh_server: SshServer, fake_host: FakeHost, tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """Build an ssh source config pointing at the test sshd; keyword arguments override."""

    def build(hosts: list[dict[str, Any]] | None = None, **overrides: Any) -> dict[str, Any]:
        return {
            "user": ssh_server.user,
            "private_key": ssh_server.client_key,
            "nvidia_smi": fake_host.command,
            "hosts": hosts if hosts is not None else [ssh_server.host("gpu-a")],
            "connect_timeout": 5,
            "command_timeout": 10,
            "state_dir": str(tmp_path / "state"),
            **overrides,
        }

    return build
