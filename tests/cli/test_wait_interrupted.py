"""Ctrl-C while `request --wait` waits cancels the request (releases it) and exits 130."""

from __future__ import annotations

import pytest

import gpupool_cli.waiting


@pytest.mark.django_db(transaction=True)
def test_ctrl_c_while_waiting_cancels_the_lease_and_exits_130(server, monkeypatch) -> None:
    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    # No scheduler runs, so the lease stays pending; the first pause of the wait is "Ctrl-C".
    monkeypatch.setattr(gpupool_cli.waiting.time, "sleep", interrupt)
    code, _, err = server.run("request", "--gpus", "1", "--pool", "training", "--wait")
    assert code == 130 and "cancelled lease" in err
    from allocation.models import Lease

    lease = Lease.objects.get()
    assert lease.state == "released" and "cancelled from the CLI" in lease.reason
