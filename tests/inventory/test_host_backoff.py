"""A dead SSH host backs off: real sshd on loopback (one that is stopped and started again on its
port), fake nvidia-smi printing real captures, real database. Rounds are run at chosen database
times (`source_discover(now=...)`) instead of waiting minutes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from core.db import db_now
from inventory.discovery import source_discover
from inventory.models import Gpu, Host, Source
from tests.support.sshd import FakeHost, SshServer, sshd_missing_reason

pytestmark = [pytest.mark.django_db, pytest.mark.sshd]


@pytest.fixture
def flaky(ssh_server: SshServer, nvidia_smi_fleets: Path, tmp_path: Path) -> Iterator[SshServer]:
    """A second sshd: a host of its own (a T4) that can die and come back, taking the same client key."""
    reason = sshd_missing_reason()
    if reason:
        pytest.skip(f"real-sshd tier skipped: {reason}")
    with SshServer(tmp_path / "flaky-sshd", env={"FAKE_HOST_FLEET": str(nvidia_smi_fleets / "t4")}) as server:
        shutil.copy(ssh_server.dir / "authorized_keys", server.dir / "authorized_keys")
        yield server


@pytest.fixture
def lab_config(ssh_server: SshServer, flaky: SshServer, fake_host: FakeHost, tmp_path: Path) -> dict[str, Any]:
    return {
        "pools": [{"name": "training"}],
        "sources": [{
            "name": "lab", "kind": "ssh", "pool": "training", "user": ssh_server.user,
            "private_key": ssh_server.client_key, "nvidia_smi": fake_host.command,
            "hosts": [ssh_server.host("healthy"), flaky.host("flaky")],
            "connect_timeout": 3, "command_timeout": 10, "state_dir": str(tmp_path / "state"),
            "backoff": {"initial_s": 30, "max_s": 120},
        }],
    }


@pytest.fixture
def lab(apply_yaml: Any, lab_config: dict[str, Any]) -> Source:
    apply_yaml(json.dumps(lab_config), discover=False)
    return Source.objects.get(name="lab")


def _round(source: Source, at: datetime) -> Any:
    return source_discover(source=Source.objects.get(pk=source.pk), now=at)


def _flaky() -> Host:
    return Host.objects.get(name="flaky")


def _after(host: Host, at: datetime) -> float:
    assert host.next_probe_at is not None
    return (host.next_probe_at - at).total_seconds()


def test_a_refusing_host_backs_off_is_skipped_until_due_and_recovers(lab: Source, flaky: SshServer) -> None:
    t0 = db_now()
    report = _round(lab, t0)
    assert (report.hosts_seen, report.hosts_failed, report.hosts_skipped) == (2, 0, 0)
    gpus = set(Gpu.objects.filter(host__name="flaky").values_list("uuid", flat=True))
    assert len(gpus) == 1 and _flaky().probe_failures == 0 and _flaky().next_probe_at is None

    flaky.stop()  # the port refuses connections from now on
    at, delays = t0 + timedelta(seconds=60), []
    report = _round(lab, at)
    host = _flaky()
    assert (report.hosts_failed, host.state, host.probe_failures) == (1, "offline", 1)
    assert host.error == f"cannot connect to 127.0.0.1:{flaky.port}: connection refused"
    offline_since = host.offline_since
    delays.append(_after(host, at))
    for _ in range(3):  # each round at the host's due time fails again: the wait grows to the cap
        due = _flaky().next_probe_at
        assert due is not None
        at = due
        skipped = _round(lab, at - timedelta(seconds=1))  # a second early: left out, untouched
        assert (skipped.hosts_skipped, skipped.hosts_failed, skipped.hosts_seen) == (1, 0, 1)
        assert _flaky().probe_failures == len(delays)
        report = _round(lab, at)
        assert (report.hosts_skipped, report.hosts_failed) == (0, 1)
        delays.append(_after(_flaky(), at))
    assert _flaky().probe_failures == 4
    assert 24 <= delays[0] <= 30 and 48 <= delays[1] <= 60 and 96 <= delays[2] <= 120 and 96 <= delays[3] <= 120
    # Backing off changes nothing else: offline since the first failure, its GPUs kept (offline).
    host = _flaky()
    assert host.offline_since == offline_since and host.state == "offline"
    assert set(Gpu.objects.filter(host=host, gone=False, state="offline").values_list("uuid", flat=True)) == gpus

    flaky.start()  # the same host back, same port and key
    due = _flaky().next_probe_at
    assert due is not None
    assert _round(lab, due - timedelta(seconds=1)).hosts_skipped == 1  # not due yet: still offline
    assert _flaky().state == "offline"
    report = _round(lab, due)
    host = _flaky()
    assert (report.hosts_seen, report.hosts_failed, report.hosts_skipped) == (2, 0, 0)
    assert (host.state, host.error, host.probe_failures, host.next_probe_at) == ("ready", "", 0, None)
    assert Gpu.objects.filter(host=host, gone=False).exclude(state="offline").count() == 1


def test_an_admins_discover_probes_hosts_backing_off_at_once(lab: Source, flaky: SshServer) -> None:
    flaky.stop()
    _round(lab, db_now())
    assert _flaky().next_probe_at is not None and _flaky().probe_failures == 1
    out = StringIO()
    call_command("discover", stdout=out)  # every host, whatever their backoff
    assert _flaky().probe_failures == 2
    assert "(failed 2× in a row; next probe " in out.getvalue()
    assert "0 backing off" in out.getvalue()

    flaky.start()
    call_command("discover", "--host", "healthy", stdout=StringIO())  # only the named host is forced
    assert _flaky().probe_failures == 2 and _flaky().state == "offline"
    out = StringIO()
    call_command("discover", "--host", "flaky", stdout=out)
    assert (_flaky().state, _flaky().probe_failures, _flaky().next_probe_at) == ("ready", 0, None)
    assert "2 host(s) answered, 0 failed, 0 backing off" in out.getvalue()


def test_the_beats_round_leaves_a_host_backing_off_out(lab: Source, flaky: SshServer) -> None:
    from inventory.tasks import discover_source

    flaky.stop()
    _round(lab, db_now())
    discover_source(lab.pk)  # the task the beat fans out, on the database's clock
    assert _flaky().probe_failures == 1  # not probed again before its time


def test_changing_the_source_entry_ends_the_backoff(lab: Source, flaky: SshServer, apply_yaml: Any,
                                                    lab_config: dict[str, Any]) -> None:
    flaky.stop()
    _round(lab, db_now())
    assert _flaky().next_probe_at is not None
    lab_config["sources"][0]["interval_s"] = 30
    assert any("interval_s" in change for change in apply_yaml(json.dumps(lab_config), discover=False))
    assert _flaky().next_probe_at is None and _flaky().probe_failures == 1
