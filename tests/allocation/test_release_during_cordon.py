"""A drain and lease releases at once, on PostgreSQL, each on its own connection (a thread).

The drain locks the host's leases before it touches the host or its GPUs, the order a release
takes them in (lease, then its GPUs, reading its host): whichever of the two locks a lease first,
the other waits for it and never for a lock the first then needs. The interleavings are forced:
one side is held at a chosen point, the other is seen waiting in pg_stat_activity, then both go
on. The ledger (allocation.selectors.invariants) must agree with itself afterwards: a drain that locked
the host first left a GPU released meanwhile marked free on a draining host.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from allocation.engine import run_pass
from allocation.lease_states import lease_free_gpus
from allocation.models import Lease, LeaseUsage, Team
from allocation.selectors.invariants import ledger_check
from allocation.services import admin as admin_services
from allocation.services import leases as lease_services
from allocation.services.admin import host_admin_action
from allocation.services.leases import lease_release
from inventory.models import Gpu, Host

pytestmark = pytest.mark.django_db(transaction=True)

FLEET = """
pools: [{name: gpus}]
teams: [{name: a}, {name: b}]
priority_classes:
  - {name: default, value: 0}
sources:
  - {name: sim, kind: simulated, pool: gpus, hosts: %(hosts)s, gpus_per_host: 4}
"""
WAIT_S = 10


class Worker(threading.Thread):
    """Runs `work` on a database connection of its own; keeps its backend pid, result and error."""

    def __init__(self, name: str, work: Callable[[], Any]) -> None:
        super().__init__(name=name, daemon=True)
        self.work = work
        self.pid: int | None = None
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            connection.ensure_connection()
            self.pid = connection.connection.info.backend_pid
            self.result = self.work()
        except BaseException as exc:  # handed to the test thread, which asserts there is none
            self.error = exc
        finally:
            connection.close()

    def finish(self) -> Any:
        self.join(WAIT_S * 2)
        assert not self.is_alive(), f"{self.name} still running"
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture
def granted(apply_yaml: Any, make_user: Any, api: Any) -> Callable[..., list[str]]:
    """`granted(n, hosts=1, gpus=1)` → ids of n granted leases (teams a and b in turn)."""
    def make(n: int, hosts: int = 1, gpus: int = 1) -> list[str]:
        if not Host.objects.exists():
            apply_yaml(FLEET % {"hosts": hosts})
        client = api(make_user("ann", teams=("a", "b")))
        ids = [client.post("/api/v1/leases/", {"pool": "gpus", "gpus": gpus, "team": "ab"[i % 2]},
                           format="json").json()["id"] for i in range(n)]
        run_pass()
        assert set(Lease.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"granted"}
        return ids

    return make


def _wait_blocked(waiter: Worker, holder: Worker) -> None:
    """Until `waiter` waits for a lock `holder` holds (PostgreSQL's own view of it)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        assert waiter.is_alive() and time.monotonic() < deadline, (
            f"{waiter.name} never waited for {holder.name}: {waiter.error!r}")
        if waiter.pid is not None and holder.pid is not None:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_blocking_pids(%s)", [waiter.pid])
                if holder.pid in cur.fetchone()[0]:
                    return
        time.sleep(0.01)


def _lockable_now(sql: str, params: list[Any]) -> bool:
    """Whether this connection could lock the rows `sql` (a SELECT … FOR UPDATE NOWAIT) names
    right now, i.e. no other transaction holds them; the lock is let go at once."""
    try:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(sql, params)
    except OperationalError:
        return False
    return True


def _no_retries(caplog: pytest.LogCaptureFixture) -> None:
    """No deadlock happened at all: core.db.retry_on_deadlock logs every run it repeats, and
    would otherwise hide one from these tests."""
    assert not [r.getMessage() for r in caplog.records if r.name == "core.db"]


def _check_consistent(ids: list[str]) -> None:
    report = ledger_check()
    assert report.ok, report.as_dict()
    for lease in Lease.objects.filter(pk__in=ids):
        assert lease.ended_at is not None and lease.granted_at is not None
        assert lease.ended_at >= lease.granted_at


class Threads:
    """The test's workers and held calls. At teardown every held call is let go and every worker
    joined, before the database is flushed: a failed test must not leave a thread holding locks
    that the flush then waits for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.workers: list[Worker] = []
        self.gates: list[threading.Event] = []

    def start(self, name: str, work: Callable[[], Any]) -> Worker:
        worker = Worker(name, work)
        self.workers.append(worker)
        worker.start()
        return worker

    def hold(self, module: Any, name: str, *, thread: str) -> tuple[threading.Event, threading.Event]:
        """Hold calls of `module.name` in the thread named `thread` until `go` is set; `arrived`
        is set when one is held (before the call: whatever the caller locked so far stays locked)."""
        arrived, go = threading.Event(), threading.Event()
        self.gates.append(go)
        real = getattr(module, name)

        def held(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread().name == thread:
                arrived.set()
                assert go.wait(WAIT_S * 2)
            return real(*args, **kwargs)

        self.monkeypatch.setattr(module, name, held)
        return arrived, go

    def close(self) -> None:
        for go in self.gates:
            go.set()
        for worker in self.workers:
            worker.join(WAIT_S * 2)


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Threads]:
    registry = Threads(monkeypatch)
    yield registry
    registry.close()


def test_a_drain_waits_for_a_release_holding_its_lease_before_touching_the_host(granted, threads, caplog) -> None:
    released, drained = granted(2)
    host = Host.objects.get()
    # The release holds its lease's row lock (its locked read done), before it writes anything.
    arrived, go = threads.hold(lease_services, "lease_end", thread="release")
    release = threads.start("release", lambda: lease_release(lease=released, actor="ann"))
    assert arrived.wait(WAIT_S)
    drain = threads.start("drain", lambda: host_admin_action(host=host, verb="drain", actor="root"))
    _wait_blocked(drain, release)
    # The drain waits for the lease with neither the host nor any of its GPUs locked: nothing
    # the release goes on to write or read can be waiting for the drain.
    assert _lockable_now("SELECT id FROM inventory_host WHERE id = %s FOR UPDATE NOWAIT", [host.pk])
    assert _lockable_now("SELECT id FROM inventory_gpu WHERE host_id = %s FOR UPDATE NOWAIT", [host.pk])
    go.set()
    assert release.finish().state == "released"
    assert drain.finish().admin_state == "draining"

    assert Lease.objects.get(pk=released).state == "released"  # ended before the drain got to it
    drained_lease = Lease.objects.get(pk=drained)
    assert drained_lease.state == "preempted" and drained_lease.ending_since is not None
    # The GPU the release freed is refreshed by the drain that came after it: cordoned, not
    # free on a draining host (what the host-first order left behind).
    freed = Gpu.objects.get(lease_links__lease_id=released)
    assert (freed.leased, freed.state) == (False, "cordoned")
    _check_consistent([released, drained])
    _no_retries(caplog)


def test_a_release_waits_for_a_drain_holding_the_leases_and_finds_its_lease_preempted(granted, threads, caplog) -> None:
    lease_id, other = granted(2)
    host = Host.objects.get()
    # The drain has locked the host's leases and is about to change the host row.
    arrived, go = threads.hold(admin_services, "host_drain", thread="drain")
    drain = threads.start("drain", lambda: host_admin_action(host=host, verb="drain", actor="root"))
    assert arrived.wait(WAIT_S)
    release = threads.start("release", lambda: lease_release(lease=lease_id, actor="ann"))
    _wait_blocked(release, drain)
    go.set()
    assert drain.finish().admin_state == "draining"
    # Release is idempotent on an ended lease: it returns it as the drain left it.
    assert release.finish().state == "preempted"
    assert set(Lease.objects.filter(pk__in=[lease_id, other]).values_list("state", flat=True)) == {"preempted"}
    _check_consistent([lease_id, other])
    _no_retries(caplog)


def _release_all_while_draining(threads: Threads, ids: list[str]) -> None:
    """Every lease released, each on its own connection, while every host drains; all let go at
    once."""
    start = threading.Barrier(len(ids) + Host.objects.count(), timeout=WAIT_S)

    def released(lease_id: str) -> Callable[[], Any]:
        return lambda: (start.wait(), lease_release(lease=lease_id, actor="ann"))

    def drained(host: Host) -> Callable[[], Any]:
        return lambda: (start.wait(), host_admin_action(host=host, verb="drain", actor="root"))

    workers = [threads.start(f"release-{i}", released(i)) for i in ids]
    workers += [threads.start(f"drain-{h.name}", drained(h)) for h in Host.objects.all()]
    for worker in workers:
        worker.finish()


def test_releases_and_drains_all_at_once_raise_nothing_and_keep_the_ledger(granted, threads, caplog) -> None:
    """Not a forced interleaving: every lease released while both hosts drain, three rounds."""
    ids_seen: list[str] = []
    for _ in range(3):
        ids = granted(8, hosts=2)
        ids_seen += ids
        _release_all_while_draining(threads, ids)
        assert not Lease.objects.filter(pk__in=ids).exclude(state__in=["released", "preempted"]).exists()
        _check_consistent(ids_seen)
        # The drained leases' GPUs come back (as the unbind task or reaper would), the hosts too.
        lease_free_gpus(list(Lease.objects.filter(pk__in=ids, ending_since__isnull=False).values_list("pk", flat=True)))
        for host in Host.objects.all():
            host_admin_action(host=host, verb="uncordon", actor="root")
    _check_consistent(ids_seen)
    _no_retries(caplog)


def _blocked_by(pid: int | None, holder: int | None) -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT %s = ANY(pg_blocking_pids(%s))", [holder, pid])
        return bool(cur.fetchone()[0])


def test_two_drains_end_their_teams_leases_in_one_order(granted, threads, caplog) -> None:
    """Each lease a drain ends locks its team's ledger row. Host 1's newest lease is team b's,
    host 2's team a's: ended in lock order (newest first) the two drains would take the rows
    a/b and b/a. Both drains are held after their first end until the other has ended one too
    or waits for them; in team order the second waits at its first, nothing deadlocks."""
    ids = granted(4, hosts=2, gpus=2)
    first, second = Host.objects.order_by("pk")
    by_host = {h.pk: list(Lease.objects.filter(pk__in=ids, host=h).order_by("pk")) for h in (first, second)}
    assert [len(v) for v in by_host.values()] == [2, 2]
    teams = {name: Team.objects.get(name=name).pk for name in "ab"}
    base = timezone.now() - timedelta(minutes=5)
    for host, newest_team in ((first, "b"), (second, "a")):
        older, newer = by_host[host.pk]
        for lease, team, age in ((older, "ab".replace(newest_team, ""), 0), (newer, newest_team, 1)):
            Lease.objects.filter(pk=lease.pk).update(team_id=teams[team], created_at=base + timedelta(seconds=age))
            LeaseUsage.objects.filter(lease_id=lease.pk).update(team_id=teams[team])
    ended_one = {"drain-1": threading.Event(), "drain-2": threading.Event()}
    real_end = admin_services.lease_end

    def end_then_hold(lease: Lease, *args: Any, **kwargs: Any) -> None:
        me = threading.current_thread().name
        other = next(name for name in ended_one if name != me)
        real_end(lease, *args, **kwargs)
        if not ended_one[me].is_set():
            ended_one[me].set()
            workers = {w.name: w for w in threads.workers}
            deadline = time.monotonic() + WAIT_S
            while not (ended_one[other].is_set() or _blocked_by(workers[other].pid, workers[me].pid)):
                assert time.monotonic() < deadline
                time.sleep(0.01)

    threads.monkeypatch.setattr(admin_services, "lease_end", end_then_hold)
    drains = [threads.start(f"drain-{i}", lambda h=h: host_admin_action(host=h, verb="drain", actor="root"))
              for i, h in ((1, first), (2, second))]
    for drain in drains:
        assert drain.finish().admin_state == "draining"
    assert set(Lease.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"preempted"}
    _check_consistent(ids)
    _no_retries(caplog)


def test_a_release_across_two_hosts_locks_both_hosts_before_any_gpu(apply_yaml, make_user, api, threads,
                                                                     caplog) -> None:
    """A lease on two hosts, released while a cordon of the second host holds that host's row
    and is about to refresh its GPUs. The release must wait for the host before it locks a GPU
    (lease, host, GPU: the order every writer keeps); had it locked the GPUs after the first
    host only, the cordon's GPU refresh would wait for it while it waits for the cordon."""
    from inventory import services as inventory_services

    apply_yaml(FLEET % {"hosts": 2})
    client = api(make_user("ann", teams=("a",)))
    lease_id = client.post("/api/v1/leases/", {"pool": "gpus", "gpus": 8, "team": "a", "same_host": False},
                           format="json").json()["id"]
    run_pass()
    assert Lease.objects.get(pk=lease_id).state == "granted"
    first, second = Host.objects.order_by("pk")
    arrived, go = threads.hold(inventory_services, "gpu_refresh_states", thread="cordon")
    cordon = threads.start("cordon", lambda: host_admin_action(host=second, verb="cordon", actor="root"))
    assert arrived.wait(WAIT_S)
    release = threads.start("release", lambda: lease_release(lease=lease_id, actor="ann"))
    _wait_blocked(release, cordon)
    assert _lockable_now("SELECT id FROM inventory_gpu WHERE host_id = ANY(%s) FOR UPDATE NOWAIT",
                         [[first.pk, second.pk]])
    go.set()
    assert cordon.finish().admin_state == "cordoned"
    assert release.finish().state == "released"
    states = dict(Gpu.objects.values_list("host_id", "state").distinct())
    assert states == {first.pk: "free", second.pk: "cordoned"}
    _check_consistent([lease_id])
    _no_retries(caplog)
