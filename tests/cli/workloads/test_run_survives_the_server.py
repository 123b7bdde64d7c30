"""A `gpupool run` whose output stream breaks, because the production web server is killed under it
and started again, goes on where it left off: every line once, none twice, and the workload's exit
code at the end, though the workload ended while the server was down. A lease lost meanwhile ends
the run with its own code (76) and the reason on stderr."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from allocation.models import Lease
from allocation.services.reaper import leases_mark_lost
from stacktools.processes import Proc
from tests.cli.workloads.conftest import Binder, Gpupool
from tests.support.processes import killable_web_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sshd]


@pytest.fixture
def own_web(lab: Gpupool, tmp_path: Path) -> Iterator[tuple[Proc, Gpupool]]:
    """A web server of this test's own (to kill), and the CLI pointed at it."""
    with killable_web_server(tmp_path / "web.log", GPUPOOL_AUTOSCHEDULE="0") as (proc, url):
        yield proc, Gpupool(url=url, token=lab.token, config=lab.config)


def test_a_server_restart_under_the_stream_loses_no_line_and_doubles_none(
        own_web: tuple[Proc, Gpupool], binder: Binder, tmp_path: Path) -> None:
    web, cli = own_web
    gate = tmp_path / "gate"
    script = f"echo one; echo two; while [ ! -e '{gate}' ]; do sleep 0.05; done; echo three; exit 4"
    proc, out, err = cli.start("run", "--pool", "vms", "--gpus", "1", "--", "sh", "-c", script)
    out.wait_for("two")
    web.kill9()  # the stream breaks mid-answer (no last chunk), the long poll too
    err.wait_for("server not answering")
    gate.touch()  # the workload writes its last line and ends while nobody can read it
    binder.stop.wait(1.0)
    web.start(timeout=60)
    assert proc.wait(timeout=90) == 4, err.text
    assert out.text == "one\ntwo\nthree\n", err.text
    assert "lease released: process exited with code 4" in err.text


def test_a_lost_lease_ends_the_run_with_its_own_code_and_reason(lab: Gpupool, binder: Binder) -> None:
    proc, out, err = lab.start("run", "--pool", "vms", "--gpus", "1", "--", "sh", "-c", "echo up; exec sleep 300")
    out.wait_for("up")
    lease = Lease.objects.get()
    leases_mark_lost([lease.pk], reason_prefix="host gpu-a went away")
    assert proc.wait(timeout=60) == 76, err.text
    assert "lease lost: host gpu-a went away" in err.text and "(exit 76)" in err.text


def test_the_exit_code_table_has_a_code_for_each_way_a_lease_ends_without_one() -> None:
    from gpupool_cli.running import exit_code

    base: dict[str, Any] = {"exit_code": None, "binding": {"status": {}}}
    codes = {state: exit_code({**base, "state": state}) for state in ("preempted", "lost", "expired", "failed",
                                                                      "released")}
    assert codes == {"preempted": 75, "lost": 76, "expired": 77, "failed": 78, "released": 79}
    assert exit_code({**base, "state": "preempted", "exit_code": 0}) == 0  # the workload's own code first
