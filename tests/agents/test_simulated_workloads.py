"""The simulated fleet's workloads (the demo's): they end after the binding's `duration_s` (else the
source's `workload_duration_s`, else never) with the binding's `exit_code`, and write a made-up log
that says so."""

from __future__ import annotations

import threading
import time

from agents.base import BIND_FAILED, BIND_RUNNING, BIND_SUCCEEDED, BindRequest
from agents.simulated import SimulatedConnector


def _bind(connector: SimulatedConnector, **spec: object) -> dict[str, object]:
    request = BindRequest(lease_id="L1", host_name="demo-node-0", host_address="demo-node-0", gpu_uuids=("g0",),
                          spec={"kind": "process", "command": ["python", "train.py", "--lr", "3e-4"], **spec})
    return dict(connector.bind(request).handle)


def test_a_workload_ends_after_its_duration_with_its_exit_code() -> None:
    connector = SimulatedConnector("demo", {})
    handle = _bind(connector, duration_s=1, exit_code=3)
    assert connector.observe(handle).state == BIND_RUNNING
    handle["started"] = time.time() - 1.0  # its second is up
    ended = connector.observe(handle)
    assert (ended.state, ended.exit_code, ended.reason) == (BIND_FAILED, 3, "simulated workload exited with code 3")
    ok = connector.observe({**_bind(connector, duration_s=0)})
    assert (ok.state, ok.exit_code) == (BIND_SUCCEEDED, 0)


def test_the_sources_workload_duration_is_the_default_and_without_one_it_runs_until_stopped() -> None:
    handle = _bind(SimulatedConnector("demo", {"workload_duration_s": 30}))
    assert handle["duration_s"] == 30
    forever = _bind(SimulatedConnector("demo", {}))
    assert SimulatedConnector("demo", {}).observe({**forever, "started": 0}).state == BIND_RUNNING
    assert SimulatedConnector.validate_config({"workload_duration_s": -1})
    assert SimulatedConnector.validate_config({"workload_duration_s": "soon"})
    assert not SimulatedConnector.validate_config({"workload_duration_s": 12.5})


def test_its_log_names_the_command_counts_its_steps_and_ends_with_the_exit_code() -> None:
    connector = SimulatedConnector("demo", {})
    handle = _bind(connector, duration_s=2, exit_code=3)
    handle["started"] = time.time() - 10  # long over
    lines = b"".join(connector.logs(handle, tail=None, follow=True)).decode().splitlines()
    assert lines == ["[simulated] process of lease L1 on demo-node-0: python train.py --lr 3e-4",
                     "[simulated] step 1 of 2", "[simulated] exited with code 3"]
    assert b"".join(connector.logs(handle, tail=1, follow=False)) == b"[simulated] exited with code 3\n"


def test_a_follow_writes_a_line_a_second_until_the_end_or_until_closed() -> None:
    connector = SimulatedConnector("demo", {})
    stream = connector.logs(_bind(connector, duration_s=1), tail=0, follow=True)
    started = time.monotonic()
    assert b"".join(stream) == b"[simulated] exited with code 0\n"
    assert 0.5 < time.monotonic() - started < 2.5 and stream.workload_ended
    endless = connector.logs(_bind(connector), tail=None, follow=True)
    assert next(endless).startswith(b"[simulated] process of lease L1")
    threading.Timer(0.2, endless.close).start()
    assert list(endless) == [] and not endless.workload_ended
