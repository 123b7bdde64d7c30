"""`request --wait` outlives the server: the web server stopped and started again while a lease
waits does not cancel it, and the wait ends granted once a pass grants it. SIGTERM and Ctrl-C to a
waiting `run`, and `--timeout`, do cancel it, with an audit reason that says which."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from allocation.engine import run_pass
from allocation.models import AuditEvent, Lease
from stacktools.processes import Proc, answers, running, web_command
from stacktools.ready import free_port
from tests.cli.streams import Lines
from tests.support.processes import process_env

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def web(server: Any, tmp_path: Any) -> Iterator[tuple[Proc, str]]:
    """The production web server (gunicorn + uvicorn: long polls) on a port of its own."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = Proc("web server", web_command(port, 1), process_env(GPUPOOL_AUTOSCHEDULE="0"), tmp_path / "web.log",
                answers(f"{url}/healthz"))
    with running([proc], timeout=60):
        yield proc, url


def test_a_server_restart_during_request_wait_does_not_cancel_the_lease(server: Any, web: Any) -> None:
    proc, url = web
    waiting = Lines(server.popen("request", "--pool", "training", "--gpus", "2", "--wait", env={"GPUPOOL_URL": url}))
    lease_id = waiting.wait_for("requested lease").split()[-1]
    waiting.wait_for("pending")
    proc.kill9()  # the server dies under the long poll (a crash, an upgrade's restart)
    waiting.wait_for("server not answering", timeout=30)  # the CLI says so, and keeps trying
    assert Lease.objects.get(pk=lease_id).state == "pending"
    proc.start(timeout=60)
    run_pass()
    code, out, err = waiting.finish(timeout=60)
    assert code == 0, err
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line and not line.startswith(" "))
    assert fields["id"].strip() == lease_id and fields["state"].strip() == "granted"
    assert fields["gpus"].strip() == "2/2"
    assert not AuditEvent.objects.filter(lease_id=lease_id, action="lease.released").exists()


@pytest.mark.parametrize("sig, code, said", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_a_signal_to_a_waiting_run_cancels_its_lease_saying_which(server: Any, sig: int, code: int,
                                                                  said: str) -> None:
    running_cli = Lines(server.popen("run", "--pool", "training", "--gpus", "1", "--poll", "0.2", "--",
                                     "python", "train.py"))
    lease_id = running_cli.wait_for("requested lease").split()[-1]
    running_cli.wait_for("pending")
    running_cli.proc.send_signal(sig)
    exit_code, _, err = running_cli.finish(timeout=60)
    assert exit_code == code, err
    assert f"cancelled lease {lease_id} ({said})" in err
    lease = Lease.objects.get(pk=lease_id)
    assert lease.state == "released"
    assert lease.reason.startswith(f"cancelled from the CLI: {said} after ")
    assert "it was pending (queued): waiting for the next scheduling pass" in lease.reason, lease.reason
    event = AuditEvent.objects.get(lease_id=lease_id, action="lease.released")
    assert said in event.message


def test_the_timeout_cancels_with_its_own_exit_code_and_the_reason_it_was_waiting(server: Any) -> None:
    run_pass()  # nothing to grant; the lease below then waits for the next pass
    code, _, err = server.run("request", "--pool", "training", "--gpus", "1", "--wait", "--timeout", "2s",
                              "--poll", "0.2")
    assert code == 124, err
    assert err.rstrip().endswith("still pending after 2s (timeout)")
    lease = Lease.objects.get()
    assert lease.state == "released"
    assert lease.reason.startswith("cancelled from the CLI: --timeout 2s passed after 2s waiting; it was pending")
