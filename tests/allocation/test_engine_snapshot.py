"""The lean snapshot reads what the models say (checked against a plain ORM reading, the engine's
previous implementation), and reuses a view only while its rows are unchanged."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import Count, Q
from django.utils import timezone

from agents.registry import placement_domain, placement_traits
from allocation.choices import END_STATES
from allocation.engine import build_snapshot, run_pass
from allocation.engine.lease_reads import BY_POOL, PENDING_SQL
from allocation.engine.snapshot import read_pool
from allocation.ledger import half_life_s
from allocation.models import Lease, LeaseGpu, PriorityClass, Quota, Team, UsageLedger
from allocation.policy.fairshare import decay, interval_usage
from allocation.policy.types import (
    GpuView,
    PoolView,
    PriorityClassView,
    QuotaView,
    RequestView,
    RunningView,
    TeamView,
)
from allocation.policy.where import selector_of
from core.db.statements import positional, statement_name
from inventory.choices import Health, HostState
from inventory.models import Gpu, Host, Pool

pytestmark = pytest.mark.django_db


def _ts(value):
    return value.timestamp() if value is not None else None


def reference(pool: Pool):
    """The snapshot as the engine used to read it, through the ORM, one concern at a time."""
    parents = set(Gpu.objects.filter(pool=pool, parent__isnull=False).values_list("parent_id", flat=True))
    held_elsewhere = set(LeaseGpu.objects.filter(active=True, gpu__pool=pool).exclude(lease__pool=pool)
                         .values_list("gpu_id", flat=True))
    gpus = tuple(
        GpuView(id=pk, pool=pool.name, host=host, model=model, memory_mb=mem or 0, driver_version=drv,
                cuda_version=cuda, mig_profile=mig, time_sliced=replicas > 1,
                physical=physical if replicas > 1 else "",
                schedulable=(host_state == HostState.READY and health == Health.OK and not foreign
                             and pk not in parents | held_elsewhere),
                workloads=placement_traits(kind)[0], domain=placement_domain(kind, source))
        for pk, host, host_state, model, mem, drv, cuda, health, foreign, mig, replicas, physical, kind, source
        in Gpu.objects.filter(pool=pool, gone=False).values_list(
            "pk", "host__name", "host__state", "model", "memory_mb", "host__driver_version",
            "host__cuda_version", "health", "foreign", "mig_profile", "shared_replicas", "physical_uuid",
            "host__source__kind", "host__source__name"))
    holding: dict[str, list[int]] = {}
    for lease_id, gpu_id in LeaseGpu.objects.filter(active=True, lease__pool=pool).values_list("lease_id", "gpu_id"):
        holding.setdefault(str(lease_id), []).append(gpu_id)
    running = {
        str(pk): RunningView(str(pk), team, pool.name, tuple(sorted(holding[str(pk)])), prio, preemptible,
                             _ts(granted) or 0.0, borrowed, min_rt, _ts(expires), state in END_STATES)
        for pk, team, state, prio, preemptible, min_rt, granted, borrowed, expires
        in Lease.objects.filter(pk__in=list(holding)).values_list(
            "pk", "team__name", "state", "priority_class__value", "priority_class__preemptible",
            "priority_class__min_runtime_s", "granted_at", "borrowed", "expires_at")}
    pending = {
        str(r.pk): RequestView(str(r.pk), r.team.name, pool.name, r.gpu_count, r.priority_class.value,
                               r.created_at.timestamp(), r.model, r.min_memory_mb, r.same_host,
                               r.min_driver_version, r.min_cuda_version, float(r.ttl_seconds), r.binding_kind,
                               selector_of(r.selector).tag)
        for r in Lease.objects.filter(pool=pool, state="pending").select_related("team", "priority_class")}
    quotas = {(q.team.name, pool.name): QuotaView(q.team.name, pool.name, q.guaranteed, q.limit,
                                                  q.lending_limit)
              for q in Quota.objects.filter(pool=pool).select_related("team")}
    classes = {pc.name: PriorityClassView(pc.name, pc.value, pc.preemptible, pc.min_runtime_s, pc.grace_s)
               for pc in PriorityClass.objects.all()}
    return gpus, running, pending, quotas, classes


def reference_usage(now):
    """`ledger.team_usage_views` as it was: running leases one by one, counting their active links."""
    h = half_life_s()
    t = now.timestamp()
    usage: dict[int, float] = {}
    for led in UsageLedger.objects.all():  # a team's stripes, summed
        usage[led.team_id] = usage.get(led.team_id, 0.0) + decay(led.closed_usage, t - led.as_of.timestamp(), h)
    for team_id, n, granted in (Lease.objects.filter(granted_at__isnull=False, ended_at__isnull=True)
                                .annotate(n=Count("gpu_links", filter=Q(gpu_links__active=True)))
                                .values_list("team_id", "n", "granted_at")):
        usage[team_id] = usage.get(team_id, 0.0) + interval_usage(n, granted.timestamp(), t, t, h)
    return {name: TeamView(name, weight, usage.get(pk, 0.0))
            for pk, name, weight in Team.objects.values_list("pk", "name", "weight")}


@pytest.fixture
def mixed_pool(fleet, leases):
    """A pool with one of everything the snapshot must tell apart."""
    pool = fleet(hosts=3)
    spare = Pool.objects.get(name="spare")
    Quota.objects.create(team=Team.objects.get(name="a"), pool=pool, guaranteed=4, limit=12)
    Quota.objects.create(team=Team.objects.get(name="b"), pool=pool, guaranteed=6, lending_limit=2)
    hosts = list(Host.objects.filter(gpus__pool=pool).distinct().order_by("name"))
    gpus = {h.name: list(Gpu.objects.filter(host=h).order_by("index")) for h in hosts}
    first, second, _ = (gpus[h.name] for h in hosts)
    Host.objects.filter(pk=hosts[2].pk).update(state=HostState.CORDONED, driver_version="550.1", cuda_version="12.4")
    Gpu.objects.filter(pk=first[7].pk).update(health=Health.UNHEALTHY)
    Gpu.objects.filter(pk=first[6].pk).update(foreign=True)
    Gpu.objects.filter(pk=first[5].pk).update(gone=True)
    Gpu.objects.filter(pk=first[4].pk).update(shared_replicas=4, memory_mb=None, physical_uuid="GPU-physical")
    Gpu.objects.create(host=hosts[0], pool=pool, parent=first[3], uuid="MIG-child-1", index=3,
                       model=first[3].model, mig_profile="1g.10gb", memory_mb=10240)
    # A lease of another pool still holds a GPU moved into this one.
    [elsewhere] = leases(spare, 1, gpus=1)
    Lease.objects.filter(pk=elsewhere.pk).update(state="granted", granted_at=timezone.now())
    LeaseGpu.objects.create(lease=elsewhere, gpu=second[0])
    Gpu.objects.filter(pk=second[0].pk).update(leased=True)

    running = leases(pool, 3, gpus=2, priority="best-effort") + leases(pool, 1, gpus=2, team="b")
    run_pass([pool.pk])
    # Ending with a workload (grace running); and one ended whose GPUs were never released.
    Lease.objects.filter(pk=running[0].pk).update(state="preempted", ending_since=timezone.now(),
                                                  ended_at=timezone.now())
    Lease.objects.filter(pk=running[1].pk).update(state="released", ended_at=timezone.now())
    # A running lease holding a GPU that has since moved to the other pool.
    moved = LeaseGpu.objects.filter(lease=running[2], active=True).first().gpu_id
    Gpu.objects.filter(pk=moved).update(pool=spare)
    UsageLedger.objects.create(team=Team.objects.get(name="b"), closed_usage=5000.0,
                               as_of=timezone.now() - timedelta(hours=2))
    leases(pool, 2, gpus=8, team="b", model="H100", min_memory_mb=1000, binding_spec={"kind": "process"})
    leases(pool, 1, gpus=3, same_host=False, min_driver_version="535", ttl_seconds=60)
    return pool


def test_the_snapshot_reads_what_the_models_say(mixed_pool) -> None:
    now = timezone.now()
    snapshot, pending_rows, gpu_host = build_snapshot(mixed_pool, now)
    gpus, running, pending, quotas, classes = reference(mixed_pool)
    assert snapshot.gpus == gpus  # in the same order
    assert sum(not g.schedulable for g in gpus) == 8 + 4  # a cordoned host, 4 GPUs out here
    assert {r.lease_id: r for r in snapshot.running} == running and len(running) == 4
    assert {p.lease_id: p for p in snapshot.pending} == pending and len(pending) == 3
    assert sorted(pending_rows) == sorted(pending)
    assert snapshot.quotas == quotas and snapshot.priority_classes == classes
    assert snapshot.quotas[("b", mixed_pool.name)].lending_limit == 2
    expected_teams = reference_usage(now)
    assert list(snapshot.teams) == list(expected_teams)
    for name, team in snapshot.teams.items():
        assert team.weight == expected_teams[name].weight
        # Running usage from sums (allocation.running_usage) differs from the lease-by-lease sum
        # by rounding: ~1e-16 of the team's grant weight times h/ln2, here 4e-10 GPU-seconds.
        assert team.decayed_usage == pytest.approx(expected_teams[name].decayed_usage, rel=1e-9, abs=1e-6)
        assert team.decayed_usage > 0
    assert gpu_host == dict(Gpu.objects.filter(pool=mixed_pool, gone=False).values_list("pk", "host_id"))
    assert snapshot.now == now.timestamp() and snapshot.half_life_s == 168 * 3600.0
    assert [g.physical for g in snapshot.gpus if g.time_sliced] == ["GPU-physical"]
    assert snapshot.pools == {mixed_pool.name: PoolView(mixed_pool.name, share_across_teams=False,
                                                          fair_share_preemption_interval_s=60.0)}
    Pool.objects.filter(pk=mixed_pool.pk).update(share_across_teams=True)
    shared = build_snapshot(Pool.objects.get(pk=mixed_pool.pk), now)[0]
    assert shared.pools[mixed_pool.name].share_across_teams


def test_views_are_reused_while_their_rows_are_unchanged(mixed_pool) -> None:
    first = read_pool(mixed_pool, timezone.now()).snapshot
    second = read_pool(mixed_pool, timezone.now()).snapshot
    assert second.gpus is first.gpus
    assert all(a is b for a, b in zip(first.running, second.running, strict=True))
    assert all(a is b for a, b in zip(first.pending, second.pending, strict=True))

    host = Host.objects.filter(gpus__pool=mixed_pool).order_by("name")[0]
    Host.objects.filter(pk=host.pk).update(state=HostState.CORDONED)
    renewed = first.running[-1]
    Lease.objects.filter(pk=renewed.lease_id).update(expires_at=timezone.now() + timedelta(hours=5))
    third = read_pool(mixed_pool, timezone.now()).snapshot
    assert third.gpus is not first.gpus and third.gpus == reference(mixed_pool)[0]
    assert not any(g.schedulable for g in third.gpus if g.host == host.name)
    changed = [r for r in third.running if r.lease_id == renewed.lease_id]
    assert changed[0] is not renewed and (changed[0].expected_end or 0) > (renewed.expected_end or 0)
    assert all(a is b for a, b in zip(first.running, third.running, strict=True) if a.lease_id != renewed.lease_id)


def test_a_pass_reads_whole_only_the_pending_leases_that_changed(mixed_pool, leases) -> None:
    """Every pass reads each pending lease's row version; whole, only those new or changed since
    the last read in this process. Changes made in the same transaction (as in this test) count."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from allocation.engine import snapshot

    leases(mixed_pool, 4, gpus=1)  # a queue of 7: what changes below is the smaller part
    first = read_pool(mixed_pool, timezone.now())
    grown, dropped, kept, *others = sorted(first.pending)
    Lease.objects.filter(pk=grown).update(gpu_count=5)
    Lease.objects.filter(pk=dropped).update(state="failed", ended_at=timezone.now())
    [new] = leases(mixed_pool, 1, gpus=1)
    with CaptureQueriesContext(connection) as queries:
        second = read_pool(mixed_pool, timezone.now())
    assert {p.lease_id: p for p in second.snapshot.pending} == reference(mixed_pool)[2]
    assert sorted(second.pending) == sorted([grown, kept, *others, str(new.pk)])
    assert second.pending[grown].gpus == 5 and second.pending[kept] is first.pending[kept]
    whole = _whole_reads(queries.captured_queries)
    assert len(whole) == 1 and grown in whole[0] and str(new.pk) in whole[0] and kept not in whole[0]
    # Newest first, as the policy's tie-breaks expect.
    created = [row.created_at for row in second.pending.values()]
    assert created == sorted(created, reverse=True)

    with CaptureQueriesContext(connection) as queries:
        read_pool(mixed_pool, timezone.now())
    assert _whole_reads(queries.captured_queries) == []  # nothing changed: nothing read whole

    snapshot.forget()  # a new process: the whole queue in one scan of the pool, not a list of ids
    with CaptureQueriesContext(connection) as queries:
        cold = read_pool(mixed_pool, timezone.now())
    assert _whole_reads(queries.captured_queries) == [] and sorted(cold.pending) == sorted(second.pending)


def test_a_pass_does_not_read_again_the_explanations_it_wrote(mixed_pool, leases) -> None:
    """A pass's explanation UPDATE returns the rows' new versions: the next pass of the pool in
    this process reads none of them whole, and holds what a new process would read."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from allocation.engine import snapshot

    leases(mixed_pool, 4, gpus=1)
    read_pool(mixed_pool, timezone.now())
    run_pass([mixed_pool.pk])
    explained = Lease.objects.filter(pool=mixed_pool, state="pending").exclude(reason="")
    assert explained.count() >= 3  # what the pass wrote: the queue's reasons and positions
    with CaptureQueriesContext(connection) as queries:
        warm = read_pool(mixed_pool, timezone.now())
    assert _any_whole_reads(queries.captured_queries) == []
    snapshot.forget()
    cold = read_pool(mixed_pool, timezone.now())
    assert warm.pending == cold.pending  # code, reason, position and estimated start as stored
    assert {row.reason for row in warm.pending.values()} == set(explained.values_list("reason", flat=True))

    # A write that rolled back leaves the row at a version other than the one remembered: read whole.
    lease_id = str(explained.values_list("pk", flat=True)[0])
    row = warm.pending[lease_id]
    snapshot.remember_written(mixed_pool.pk, {lease_id: ("0(0,0)", row._replace(reason="never stored"))})
    with CaptureQueriesContext(connection) as queries:
        again = read_pool(mixed_pool, timezone.now())
    [whole] = _any_whole_reads(queries.captured_queries)
    assert lease_id in whole and again.pending[lease_id].reason == row.reason


def _whole_reads(queries: list[dict]) -> list[str]:
    """PENDING_SQL by id: planned for its ids, sent as text (lease_reads.read)."""
    return [q["sql"] for q in queries if "ANY(" in q["sql"] and "l.estimated_start" in q["sql"]]


def _any_whole_reads(queries: list[dict]) -> list[str]:
    """PENDING_SQL by id, or by pool: prepared, its EXECUTE sent after the first."""
    by_pool = statement_name(positional(PENDING_SQL.replace("{where}", BY_POOL))[0])
    return [q["sql"] for q in queries if "l.estimated_start" in q["sql"] or by_pool in q["sql"]]


def test_the_pending_read_by_id_is_planned_for_its_ids(mixed_pool, leases) -> None:
    """Never prepared: PostgreSQL's generic plan for a list of ids, estimated for ten, went through
    the state index and tested each pending row against every id (120 ms a pass in a Kueue run)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    leases(mixed_pool, 6, gpus=1)
    read_pool(mixed_pool, timezone.now())
    pending = list(Lease.objects.filter(pool=mixed_pool, state="pending").values_list("pk", flat=True))
    for n in range(7):  # past the five executions after which PostgreSQL may choose a generic plan
        Lease.objects.filter(pk=pending[n % len(pending)]).update(reason=f"changed {n}")  # one new version
        with CaptureQueriesContext(connection) as queries:
            read_pool(mixed_pool, timezone.now())
        [whole] = _whole_reads(queries.captured_queries)
        assert "EXECUTE" not in whole and str(pending[n % len(pending)]) in whole


def test_running_usage_counts_the_gpus_the_running_leases_hold(mixed_pool, leases) -> None:
    """RUNNING_SQL sums the running leases' gpu_count: the GPUs their active links hold (the grant
    writes one link a GPU, only an end's release deactivates them); leases ending with their GPUs
    still held count in neither."""
    from django.db import connection

    from allocation.ledger import RUNNING_SQL

    leases(mixed_pool, 3, gpus=2)
    run_pass([mixed_pool.pk])
    with connection.cursor() as cur:
        cur.execute(RUNNING_SQL)
        summed = {(team, at): n for team, at, n in cur.fetchall()}
    links = (LeaseGpu.objects.filter(active=True, lease__state__in=["granted", "bound"], lease__ended_at=None)
             .values("lease__team_id", "lease__granted_at").annotate(n=Count("pk")))
    granted = {(r["lease__team_id"], r["lease__granted_at"]): r["n"] for r in links}
    assert summed == {(team, at.timestamp()): n for (team, at), n in granted.items() if at is not None}
    assert sum(summed.values()) >= 4 and len(summed) >= 2


def test_a_team_or_class_made_after_the_pass_named_them_is_read_again(mixed_pool) -> None:
    """A pass names teams and classes once, before its lease reads (each statement its own
    snapshot): one committed in between is read on the first lease that names it, not a KeyError."""
    from allocation.engine.lease_reads import Names as _Names

    names = _Names()
    team = Team.objects.create(name="late")
    klass = PriorityClass.objects.create(name="late", value=7)
    assert names.team(team.pk) == "late" and names.klass(klass.pk)[:2] == ("late", 7)
