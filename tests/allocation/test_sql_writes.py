"""The SQL writes (core.db.statements, inventory.services.gpu_state_sql): the GPU state rule for every
combination of its inputs; the ledger closed in SQL as `ledger_close_many` closes it; ending one
lease in one statement writes what ending many (`leases_end`) writes; prepared statements."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocation.choices import LeaseState
from allocation.engine import run_pass
from allocation.lease_states import lease_end, lease_free_gpus, leases_end
from allocation.ledger import ledger_close_many, ledger_close_sql
from allocation.models import AuditEvent, GrantLedger, Lease, LeaseGpu, LeaseOutbox, Team, UsageLedger
from allocation.services.leases import lease_create
from inventory.choices import GpuState, Health, HostState
from inventory.models import Gpu
from inventory.services import gpu_state_sql

pytestmark = pytest.mark.django_db


def expected_state(*, host_state: str | None, gone: bool, leased: bool, health: str, foreign: bool) -> str:
    """The rule as documented: a vanished GPU or an offline host is offline; a held GPU shows
    leased even on a cordoned host; then health, foreign use, cordon (or drain); else free."""
    if gone or host_state == HostState.OFFLINE:
        return GpuState.OFFLINE
    if leased:
        return GpuState.LEASED
    if health == Health.UNHEALTHY:
        return GpuState.UNHEALTHY
    if foreign:
        return GpuState.FOREIGN
    if host_state in (HostState.CORDONED, HostState.DRAINING):
        return GpuState.CORDONED
    return GpuState.FREE


def test_the_sql_gpu_state_rule_for_every_combination() -> None:
    combos = list(itertools.product([*HostState.values, None], [False, True], [False, True],
                                    Health.values, [False, True]))
    rows = ", ".join("(%s, %s, %s, %s, %s)" for _ in combos)
    expr = gpu_state_sql(gpu="g", host_state="g.host_state")
    with connection.cursor() as cur:
        cur.execute(f'SELECT {expr} FROM (VALUES {rows}) AS g(host_state, gone, leased, health, "foreign")',
                    [v for combo in combos for v in combo])
        got = [r[0] for r in cur.fetchall()]
    want = [expected_state(host_state=h, gone=g, leased=le, health=he, foreign=f) for h, g, le, he, f in combos]
    assert got == want


@pytest.mark.parametrize("as_of_shift_s, duration_s", [(None, 3600), (-7200, 3600), (600, 3600), (-60, 0)])
def test_ledger_close_in_sql_equals_ledger_close_many(as_of_shift_s: int | None, duration_s: int) -> None:
    now = timezone.now()
    python_team, sql_team = Team.objects.create(name="py"), Team.objects.create(name="sq")
    if as_of_shift_s is not None:  # an existing ledger row, as of before or after the lease ended
        for team in (python_team, sql_team):
            UsageLedger.objects.create(team=team, closed_usage=12345.0, ended_gpus=3, ended_weight=2.5,
                                       as_of=now + timedelta(seconds=as_of_shift_s))
    granted = now - timedelta(seconds=duration_s)
    ledger_close_many([(python_team.pk, 4, granted, now)])
    sql, params = ledger_close_sql(team_id=sql_team.pk, gpus=4, granted_at=granted, ended_at=now)
    with connection.cursor() as cur:
        cur.execute(sql, params)
    python_row, sql_row = (UsageLedger.objects.get(team=t) for t in (python_team, sql_team))
    assert sql_row.closed_usage == pytest.approx(python_row.closed_usage, rel=1e-9, abs=1e-9)
    assert sql_row.as_of == python_row.as_of
    # The ended leases' grant weights move to the new as_of alike (allocation.running_usage).
    assert sql_row.ended_weight == pytest.approx(python_row.ended_weight, rel=1e-12)
    assert sql_row.ended_gpus == python_row.ended_gpus


def _snapshot(lease_id: Any) -> dict[str, Any]:
    lease = Lease.objects.get(pk=lease_id)
    gpus = Gpu.objects.filter(lease_links__lease_id=lease_id).order_by("pk")
    return {
        "lease": {f.attname: getattr(lease, f.attname) for f in Lease._meta.concrete_fields
                  if f.attname not in ("id", "created_at", "granted_at", "expires_at", "ended_at",
                                       "ending_since", "idempotency_key", "request_fingerprint")},
        "ending": lease.ending_since is not None, "ended": lease.ended_at is not None,
        "links": list(LeaseGpu.objects.filter(lease_id=lease_id).order_by("gpu_id").values_list("active", flat=True)),
        "gpus": list(gpus.values_list("state", "leased")),
        "events": list(AuditEvent.objects.filter(lease_id=lease_id).order_by("id").values_list("action", flat=True)),
        "last_event": AuditEvent.objects.filter(lease_id=lease_id).order_by("id").values(
            "actor", "message", "data", "object_type").last(),
        # The outbox: one event per transition, in its order (creation, grant, end).
        "outbox": list(LeaseOutbox.objects.filter(lease_id=lease_id).order_by("id").values_list(
            "state", "pool_id", "team_id")),
    }


def _end_a_granted_lease(user: Any, how: str, *, many: bool = False) -> dict[str, Any]:
    """Grant a lease and end it (`how`: released, bound then released, preempted with notice),
    by `lease_end` or, with `many`, by `leases_end`; what that wrote, and after freeing its GPUs."""
    lease = lease_create(user=user, pool="training", gpus=2, ttl_seconds=600)[0]
    run_pass()
    lease = Lease.objects.get(pk=lease.pk)
    assert lease.state == LeaseState.GRANTED
    if how == "bound":
        Lease.objects.filter(pk=lease.pk).update(state=LeaseState.BOUND, binding_status={"handle": "h-1"})
        lease = Lease.objects.get(pk=lease.pk)
    target = LeaseState.PREEMPTED if how == "notice" else LeaseState.RELEASED
    if many:
        leases_end([lease], target, actor="tester", reasons=[f"ended: {how}"], now=timezone.now())
    else:
        with CaptureQueriesContext(connection) as ctx:
            lease_end(lease, target, actor="tester", reason=f"ended: {how}",
                      keep_gpus=True if how == "notice" else None)
        assert len(ctx.captured_queries) == 1  # its outbox event included
    snapshot = _snapshot(lease.pk)
    if how != "released":  # the workload stopped / the notice ran out
        lease_free_gpus([lease.pk])
        snapshot["after_free"] = _snapshot(lease.pk)
    # A bulk end writes stripe 0 and holds the lease's own stripe, where the running usage's
    # trigger records the ended lease (allocation.running_usage); the one-statement end, its stripe.
    rows = UsageLedger.objects.filter(team=lease.team)
    snapshot["ledger"] = sum(row.closed_usage for row in rows) > 0
    snapshot["ended_gpus"] = sum(row.ended_gpus for row in rows)
    assert GrantLedger.objects.get(team=lease.team).gpus == 2
    Lease.objects.filter(pk=lease.pk).delete()
    UsageLedger.objects.all().delete()
    GrantLedger.objects.all().delete()
    return snapshot


@pytest.mark.parametrize("how", ["released", "bound", "notice"])
def test_ending_a_lease_in_one_statement(demo_fleet: Any, make_user: Any, how: str) -> None:
    alice = make_user("alice", teams=("vision",))
    ended = _end_a_granted_lease(alice, how)
    held = how != "released"
    state = LeaseState.PREEMPTED if how == "notice" else LeaseState.RELEASED
    assert ended["lease"]["state"] == state and ended["lease"]["reason"] == f"ended: {how}" and ended["ended"]
    assert ended["ending"] is held and ended["links"] == [held, held]
    assert ended["gpus"] == ([(GpuState.LEASED, True)] * 2 if held else [(GpuState.FREE, False)] * 2)
    assert ended["events"][-1] == f"lease.{state}"
    assert ended["last_event"]["actor"] == "tester" and ended["last_event"]["message"] == f"ended: {how}"
    assert ended["last_event"]["data"]["to"] == state
    assert ended["ledger"] and ended["ended_gpus"] == 2
    assert [row[0] for row in ended["outbox"]] == ["pending", "granted", state]
    if held:  # freed once the workload stopped / the notice ran out
        after = ended["after_free"]
        assert not after["ending"] and after["links"] == [False, False]
        assert after["gpus"] == [(GpuState.FREE, False)] * 2


@pytest.mark.parametrize("how", ["released", "bound"])
def test_ending_one_lease_in_one_statement_writes_what_ending_many_writes(
        demo_fleet: Any, make_user: Any, how: str) -> None:
    alice = make_user("alice", teams=("vision",))
    assert _end_a_granted_lease(alice, how) == _end_a_granted_lease(alice, how, many=True)


def test_statements_are_prepared_once_per_connection_and_survive_a_failed_run(settings: Any) -> None:
    from django.db import transaction

    from core.db.statements import execute

    sql = "SELECT 10 / %s::int, %s::text"

    def run(divisor: int) -> tuple[Any, str]:
        with CaptureQueriesContext(connection) as ctx, connection.cursor() as cur:
            execute(cur, sql, [divisor, "x"])
            return cur.fetchone(), ctx.captured_queries[-1]["sql"]

    with pytest.raises(Exception, match="division by zero"), transaction.atomic():
        run(0)  # PREPARE and a failing EXECUTE: the statement exists, its first run failed
    first, first_sql = run(5)
    second, second_sql = run(2)
    assert (first, second) == ((2, "x"), (5, "x"))
    assert second_sql.startswith("EXECUTE gpupool_") and "PREPARE" not in first_sql + second_sql
    settings.GPUPOOL = {**settings.GPUPOOL, "PREPARED_STATEMENTS": False}
    assert run(1) == ((10, "x"), "SELECT 10 / 1::int, 'x'::text")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "unprepared"])
def test_a_statement_sent_before_runs_first_in_the_same_transaction(settings: Any, prepared: bool) -> None:
    """`before` (a lock, for the queue caps) is held while the statement runs, and released with
    the one implicit transaction of the round trip, prepared or not, first run or later."""
    from core.db.statements import execute_as_one

    settings.GPUPOOL = {**settings.GPUPOOL, "PREPARED_STATEMENTS": prepared}
    held = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
            "AND granted AND %s::int > 0", [1])
    lock = ("SELECT pg_advisory_xact_lock(%s)", [0x6771 << 48 | 42])
    assert connection.get_autocommit()
    for _ in range(2):
        assert execute_as_one([], held, before=lock) == [(1,)]
        assert execute_as_one([], held) == [(0,)]
