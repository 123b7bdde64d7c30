"""A pass trigger the broker cannot take is not dropped: it is kept in PostgreSQL, one row per pool
(allocation.triggers.want_pass), and the catch-up task (allocation.relay_lease_events, which beat
sends every second and each worker asks for whenever it reaches the broker again) runs it, the
row going with the pass's commit. The broker down is a real refusal: the app pointed at a port
nothing listens on; the worker is a real one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from allocation.engine import run_wanted_passes
from allocation.models import Lease, PassWanted
from allocation.tasks import relay_lease_events
from allocation.triggers import request_pass, want_pass
from inventory.models import Pool
from pool.celery import app
from stacktools.ready import free_port, wait_until
from tests.support import processes
from tests.support.processes import celery_worker


def _repoint(url: str | None) -> None:
    """The app's producers to `url` (None: back to the configured broker), pools rebuilt."""
    app.conf.update(broker_write_url=url)
    app._pool = None  # type: ignore[attr-defined]
    setattr(app.amqp, "_producer_pool", None)  # noqa: B010 (private: the stubs leave it out)


@pytest.fixture
def broker_down(settings: Any) -> Iterator[None]:
    settings.GPUPOOL = {**settings.GPUPOOL, "AUTOSCHEDULE": True}
    saved = app.conf.broker_write_url
    _repoint(f"redis://127.0.0.1:{free_port()}/0")
    try:
        yield
    finally:
        _repoint(saved)


@pytest.mark.django_db
def test_a_trigger_the_broker_refuses_is_kept_for_its_pool(fleet: Any, broker_down: None) -> None:
    pool = fleet(hosts=1)  # applying the fleet asked for passes too (the broker already down)
    assert PassWanted.objects.exists()
    PassWanted.objects.all().delete()
    for _ in range(3):  # the debounce flag is cleared after a failure: each request tries again
        assert request_pass(pool.pk) is True
    assert list(PassWanted.objects.values_list("pool_id", flat=True)) == [pool.pk] * 3  # a row a wish
    request_pass(None)  # every pool
    assert set(PassWanted.objects.values_list("pool_id", flat=True)) == set(Pool.objects.values_list("pk", flat=True))


@pytest.mark.django_db
def test_the_catch_up_runs_the_wanted_pass_and_its_row_goes_with_it(fleet: Any, leases: Any) -> None:
    pool = fleet(hosts=1)
    lease, = leases(pool, 1, gpus=2)
    want_pass(pool.pk)
    want_pass(pool.pk)  # two wishes, served by one pass
    assert PassWanted.objects.count() == 2
    relay_lease_events()  # the task as beat and a reconnecting worker send it
    lease.refresh_from_db()
    assert lease.state == "granted"
    assert not PassWanted.objects.exists()
    assert run_wanted_passes() == []  # nothing left: one read, no pass


@pytest.mark.django_db(transaction=True)
def test_a_row_another_worker_is_passing_is_skipped_and_kept_until_it_commits(fleet: Any, leases: Any) -> None:
    pool = fleet(hosts=1)
    lease, = leases(pool, 1)
    want_pass(pool.pk)
    other = psycopg2.connect(processes.test_database_url())  # another worker, in the middle of that pool's pass
    try:
        with other.cursor() as cur:
            cur.execute("SELECT pool_id FROM allocation_passwanted WHERE pool_id = %s FOR UPDATE", [pool.pk])
        assert run_wanted_passes() == []  # skipped at once, not waited for
        other.rollback()  # that pass failed: its row is still there for the next catch-up
    finally:
        other.close()
    assert [report.granted for report in run_wanted_passes()] == [[str(lease.pk)]]
    assert not PassWanted.objects.exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_the_wanted_pass_as_soon_as_it_reaches_the_broker(fleet: Any, leases: Any,
                                                                        tmp_path: Path) -> None:
    """No beat here: the worker asks for the catch-up itself when its consumer connects."""
    pool = fleet(hosts=1)
    lease, = leases(pool, 1)
    want_pass(pool.pk)
    app.control.purge()  # nothing queued from before: the grant below is the catch-up's
    with celery_worker(tmp_path / "worker.log") as worker:
        granted = wait_until(lambda: Lease.objects.get(pk=lease.pk).state == "granted", timeout=30, interval=0.1)
        assert granted, worker.tail()
    assert "wanted pass gpus" in worker.log_path.read_text()
    assert not PassWanted.objects.exists()
