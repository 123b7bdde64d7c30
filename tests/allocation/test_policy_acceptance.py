"""The allocation rules end to end: leases requested through the API, passes run by `schedule`."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

import allocation.engine
from allocation.engine import run_pass
from allocation.models import AuditEvent, Lease
from tests.allocation.acceptance import ask, held, schedule, two_teams

pytestmark = pytest.mark.django_db

@pytest.fixture
def fleet(apply_yaml, make_user, api):
    return two_teams(apply_yaml, make_user, api)


def test_borrowed_gpus_are_reclaimed_for_the_owner_and_the_borrower_keeps_its_guarantee(fleet) -> None:
    ann, ben = fleet(ga=8, gb=8)
    ask(ann, 16)
    schedule()
    assert held("a") == 16
    assert Lease.objects.filter(team__name="a", borrowed=True).count() == 8

    [b_lease] = ask(ben, 1, gpus=8)
    out = schedule()
    assert "preempted 8" in out
    assert Lease.objects.get(pk=b_lease).state == "granted"
    assert held("a") == 8 and held("b") == 8
    preempted = Lease.objects.filter(team__name="a", state="preempted")
    assert preempted.count() == 8 and all(p.borrowed for p in preempted)
    assert all(str(p.preempted_by_id) == b_lease for p in preempted)
    assert AuditEvent.objects.filter(action="lease.preempt").count() == 8


def test_backlogged_teams_with_weights_3_to_1_split_16_gpus_12_to_4(fleet) -> None:
    ann, ben = fleet(wa=3, wb=1)
    ask(ann, 16)
    ask(ben, 16)
    schedule()
    assert (held("a"), held("b")) == (12, 4)


def test_a_team_never_exceeds_its_limit_whatever_is_idle(fleet) -> None:
    ann, _ = fleet(la=4)
    pending = ask(ann, 10)
    schedule()
    schedule()
    assert held("a") == 4
    waiting = Lease.objects.filter(pk__in=pending, state="pending")
    assert waiting.count() == 6
    assert all("limit" in lease.reason for lease in waiting)


def test_high_priority_preempts_best_effort_but_never_non_preemptible_work(fleet) -> None:
    ann, ben = fleet(hosts=1)
    ask(ann, 1, gpus=4, priority_class="best-effort")
    ask(ann, 1, gpus=4)  # default: not preemptible
    schedule()
    assert held("a") == 8
    [urgent] = ask(ben, 1, gpus=4, priority_class="high")
    schedule()
    assert Lease.objects.get(pk=urgent).state == "granted"
    assert Lease.objects.get(team__name="a", priority_class__name="best-effort").state == "preempted"
    assert Lease.objects.get(team__name="a", priority_class__name="default").state == "granted"
    [second] = ask(ben, 1, gpus=4, priority_class="high")
    schedule()
    assert Lease.objects.get(pk=second).state == "pending"
    assert Lease.objects.get(team__name="a", priority_class__name="default").state == "granted"


def test_best_effort_younger_than_its_minimum_runtime_is_not_preempted(fleet) -> None:
    ann, ben = fleet(hosts=1, minrt=300)
    [young] = ask(ann, 1, gpus=8, priority_class="best-effort")
    schedule()
    [urgent] = ask(ben, 1, gpus=8, priority_class="high")
    schedule()
    assert Lease.objects.get(pk=young).state == "granted"
    assert Lease.objects.get(pk=urgent).state == "pending"
    Lease.objects.filter(pk=young).update(granted_at=timezone.now() - timedelta(seconds=301))
    schedule()
    assert Lease.objects.get(pk=young).state == "preempted"
    assert Lease.objects.get(pk=urgent).state == "granted"


def test_a_same_host_request_on_a_fragmented_fleet_waits_with_a_reason_and_nothing_is_half_granted(fleet) -> None:
    ann, ben = fleet(hosts=2)
    ask(ann, 2, gpus=3)  # best fit packs both onto one host? either way no host keeps 8 free
    ask(ann, 1, gpus=3)
    schedule()
    [big] = ask(ben, 1, gpus=8)
    schedule()
    lease = Lease.objects.get(pk=big)
    assert lease.state == "pending" and lease.queue_position == 1
    assert "8" in lease.reason and "one host" in lease.reason, lease.reason
    assert not lease.gpu_links.exists()
    counts = Counter(Lease.objects.filter(state="granted").values_list("host__name", flat=True))
    assert sum(counts.values()) == 3


def test_a_team_at_its_limit_preempts_its_own_best_effort_for_high_priority_work(fleet) -> None:
    ann, _ = fleet(hosts=1, ga=8, la=8)
    ask(ann, 4)  # default: not preemptible
    best_effort = ask(ann, 4, priority_class="best-effort")
    schedule()
    assert held("a") == 8
    [urgent] = ask(ann, 1, gpus=2, priority_class="high")
    schedule()
    lease = Lease.objects.get(pk=urgent)
    assert lease.state == "granted", lease.reason
    assert held("a") == 8  # never above its limit
    preempted = Lease.objects.filter(team__name="a", state="preempted")
    assert preempted.count() == 2
    assert {str(p.pk) for p in preempted} <= set(best_effort)
    assert all(str(p.preempted_by_id) == urgent for p in preempted)
    assert all("same team a" in p.reason for p in preempted), [p.reason for p in preempted]
    assert Lease.objects.filter(team__name="a", priority_class__name="default",
                                state="granted").count() == 4
    events = AuditEvent.objects.filter(action="lease.preempt")
    assert events.count() == 2


def test_a_team_at_its_limit_waits_for_its_own_victims_with_a_reason_and_preempts_no_more(
        fleet, monkeypatch) -> None:
    monkeypatch.setattr(allocation.engine, "request_unbind", lambda lease_id: None)
    ann, _ = fleet(hosts=1, ga=8, la=8)
    ask(ann, 4)
    best_effort = ask(ann, 4, priority_class="best-effort")
    schedule()
    for age, pk in enumerate(reversed(best_effort)):  # the last one asked for is the newest
        Lease.objects.filter(pk=pk).update(
            state="bound", binding_status={"handle": "pid-1", "state": "running"},
            granted_at=timezone.now() - timedelta(minutes=10 + age))
    [urgent] = ask(ann, 1, gpus=2, priority_class="high")
    run_pass()  # the victims are told to stop; their workloads keep the GPUs through the grace
    lease = Lease.objects.get(pk=urgent)
    assert lease.state == "pending"
    newest, second = best_effort[3], best_effort[2]
    assert lease.reason == (
        f"preempting 2 leases of its own team of lower priority ({newest}, {second}) to stay within "
        "team a's limit 8 in pool gpus; waiting for 2 GPUs being freed"), lease.reason
    victims = Lease.objects.filter(team__name="a", state="preempted")
    assert sorted(str(v.pk) for v in victims) == sorted(best_effort[2:])  # the newest two
    assert all(v.reason.startswith(f"preempted for lease {urgent}: ") and "same team a" in v.reason
               for v in victims), [v.reason for v in victims]
    assert held("a") == 8
    run_pass()  # the next pass waits for them: nothing more is stopped, nothing granted
    assert Lease.objects.filter(team__name="a", state="preempted").count() == 2
    lease = Lease.objects.get(pk=urgent)
    assert lease.state == "pending"
    assert lease.reason.endswith("waiting for its own ending leases to free 2 GPUs"), lease.reason
    assert held("a") == 8
