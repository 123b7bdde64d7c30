"""GPU states written by two transactions at once, on PostgreSQL, each on a connection of its own.

Found by the fault suite's storm (tests/faults/test_storm.py): a cordon derived its GPUs' states
from a read, then wrote them; a grant committing in between was overwritten (a leased GPU stored
as `cordoned`), and a release freeing GPUs while a cordon committed stored them as `free` on the
cordoned host. Each test holds one side in an open transaction, waits until the other is seen
blocked in pg_stat_activity, then lets both finish and checks every GPU's state against the rule
(allocation.selectors.invariants's `gpu_state`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction

from allocation.engine import run_pass
from allocation.selectors.invariants import ledger_check
from allocation.services.leases import lease_release
from core.db.bulk import bulk_set
from inventory.choices import GpuState
from inventory.models import Gpu, Host
from inventory.services import host_cordon

pytestmark = pytest.mark.django_db(transaction=True)

FLEET = """
pools: [{name: gpus}]
teams: [{name: a, members: [ann]}]
priority_classes: [{name: default, value: 0}]
sources: [{name: sim, kind: simulated, pool: gpus, hosts: 1, gpus_per_host: 4}]
"""


def _in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            connection.ensure_connection()
            out["pid"] = connection.connection.info.backend_pid
            out["result"] = work()
        except BaseException as exc:  # handed to the test, which re-raises it
            out["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _wait_blocked(out: dict[str, Any], timeout: float = 10) -> None:
    """Until the thread's backend waits for a row lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "pid" in out:
            with connection.cursor() as cur:
                cur.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [out["pid"]])
                row = cur.fetchone()
            if row and row[0] == "Lock":
                return
        assert "error" not in out, out["error"]
        time.sleep(0.02)
    raise AssertionError("the other transaction never waited for the lock")


def _finish(thread: threading.Thread, out: dict[str, Any]) -> Any:
    thread.join(20)
    assert not thread.is_alive()
    if "error" in out:
        raise out["error"]
    return out.get("result")


def _states() -> dict[str, list[str]]:
    report = ledger_check()
    return {f.check: f.examples for f in report.findings}


def test_a_cordon_waits_for_a_grant_in_flight_and_keeps_its_gpus_leased(apply_yaml: Any) -> None:
    apply_yaml(FLEET)
    host = Host.objects.get()
    gpus = list(Gpu.objects.order_by("pk").values_list("pk", flat=True))[:2]
    holding = threading.Event()
    release = threading.Event()

    def grant() -> None:  # what a pass's apply step writes to the GPUs it grants
        with transaction.atomic():
            bulk_set(Gpu, gpus, leased=True, state=GpuState.LEASED)
            holding.set()
            release.wait(20)

    granting, g_out = _in_thread(grant)
    assert holding.wait(10)
    cordoning, c_out = _in_thread(lambda: host_cordon(host=host))
    _wait_blocked(c_out)
    release.set()
    _finish(granting, g_out)
    _finish(cordoning, c_out)
    states = dict(Gpu.objects.values_list("pk", "state"))
    assert [states[pk] for pk in gpus] == ["leased", "leased"]
    assert sorted(s for pk, s in states.items() if pk not in gpus) == ["cordoned", "cordoned"]
    assert _states().get("gpu_state") is None


def test_gpus_freed_while_their_host_is_cordoned_end_cordoned_not_free(apply_yaml: Any, api: Any,
                                                                         make_user: Any) -> None:
    apply_yaml(FLEET)
    client = api(make_user("ann", teams=("a",)))
    lease_id = client.post("/api/v1/leases/", {"pool": "gpus", "gpus": 2, "ttl_seconds": 600},
                           format="json").json()["id"]
    run_pass()
    host = Host.objects.get()
    holding = threading.Event()
    release = threading.Event()

    def cordon() -> None:  # the cordon's transaction, held open after it wrote the host
        with transaction.atomic():
            host_cordon(host=host)
            holding.set()
            release.wait(20)

    cordoning, c_out = _in_thread(cordon)
    assert holding.wait(10)
    releasing, r_out = _in_thread(lambda: lease_release(lease=lease_id, actor="ann"))
    _wait_blocked(r_out)  # freeing waits for the host, not past it
    release.set()
    _finish(cordoning, c_out)
    _finish(releasing, r_out)
    assert sorted(Gpu.objects.values_list("state", flat=True)) == ["cordoned"] * 4
    assert _states().get("gpu_state") is None
