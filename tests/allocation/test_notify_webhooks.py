"""Webhooks to a real HTTP receiver on loopback, from real transitions: one signed `lease.preempted`
per preemption (with its grace), `lease.granted` only after a wait, retries with backoff until a
2xx, a give-up after the limit, 410 Gone disabling the target, a budget's 80% warning."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

import allocation.engine
from allocation.models import Lease, LeaseUsage, Notification, NotificationDelivery
from allocation.notify import send
from allocation.notify.run import notifications_run
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.django_db
SECRET = "s3cret-for-the-hmac-key"


@pytest.fixture
def receiver() -> Any:
    server = WebhookReceiver().start()
    yield server
    server.hold.set()
    server.stop()


def _notify(apply_yaml: Any, url: str, events: str, **extra: Any) -> None:
    more = "".join(f", {key}: {value}" for key, value in extra.items())
    apply_yaml(f"notifications:\n  - {{name: ops, kind: webhook, url: '{url}', events: [{events}], "
               f"secret: {SECRET}{more}}}\n", discover=False)


def _preempt(fleet: Any, leases: Any) -> tuple[list[Lease], Lease]:
    """Two best-effort leases of 4 GPUs (the first with a running workload) preempted by one of 8."""
    pool = fleet(hosts=1)
    victims = leases(pool, 2, gpus=4, priority="best-effort")
    allocation.engine.run_pass([pool.pk])
    Lease.objects.filter(pk__in=[v.pk for v in victims]).update(granted_at=timezone.now() - timedelta(hours=1))
    Lease.objects.filter(pk=victims[0].pk).update(state="bound", binding_status={"handle": "pid-1", "state": "running"})
    [urgent] = leases(pool, 1, gpus=8, team="b", priority="high")
    report = allocation.engine.run_pass([pool.pk])[0]
    assert sorted(report.preempted) == sorted(str(v.pk) for v in victims)
    return victims, urgent


def test_each_preemption_reaches_the_receiver_once_signed_and_with_its_grace(fleet, leases, apply_yaml,
                                                                             receiver) -> None:
    _notify(apply_yaml, receiver.url, "lease.preempted")
    victims, urgent = _preempt(fleet, leases)

    counts = notifications_run()
    assert counts["derived"] == 2 and counts["delivered"] == 2
    assert notifications_run() == {"derived": 0}  # nothing derived or sent twice

    got = receiver.events("lease.preempted")
    assert len(receiver.received) == 2 and sorted(r.json["lease"]["id"] for r in got) == sorted(
        str(v.pk) for v in victims)
    for hit in got:
        assert hit.signed_with(SECRET), hit.headers
        body = hit.json
        assert hit.headers["X-Gpupool-Delivery"] == body["delivery_id"]
        assert hit.headers["X-Gpupool-Event"] == "lease.preempted" and hit.headers["Content-Type"] == "application/json"
        assert body["team"] == "a" and body["pool"] == "gpus" and body["lease"]["state"] == "preempted"
        assert f"preempted for lease {urgent.pk}" in body["message"] and body["text"].startswith(":warning: *gpupool")
    by_lease = {r.json["lease"]["id"]: r.json for r in got}
    running, idle = by_lease[str(victims[0].pk)], by_lease[str(victims[1].pk)]
    ended = Lease.objects.get(pk=victims[0].pk).ended_at
    assert ended is not None
    deadline = (ended + timedelta(seconds=30)).isoformat().replace("+00:00", "Z")
    assert running["grace_s"] == 30 and running["grace_deadline"] == deadline
    assert "workload is stopped at" in running["message"] and "(30 s grace)" in running["message"]
    assert idle["grace_s"] == 0 and "its GPUs were taken at once" in idle["message"]
    assert len({r.json["event_id"] for r in got}) == 2
    assert set(NotificationDelivery.objects.values_list("state", "attempts")) == {("delivered", 1)}


def test_a_lease_granted_after_a_wait_notifies_and_one_granted_at_once_does_not(fleet, leases, apply_yaml,
                                                                                receiver) -> None:
    _notify(apply_yaml, receiver.url, "lease.granted, lease.preempted")
    pool = fleet(hosts=1)
    waited, prompt = leases(pool, 2, gpus=1)
    Lease.objects.filter(pk=waited.pk).update(created_at=timezone.now() - timedelta(seconds=90))
    Lease.objects.filter(pk=prompt.pk).update(created_at=timezone.now())
    assert sorted(allocation.engine.run_pass([pool.pk])[0].granted) == sorted([str(waited.pk), str(prompt.pk)])

    notifications_run()

    [hit] = receiver.received
    body = hit.json
    assert body["event"] == "lease.granted" and body["lease"]["id"] == str(waited.pk)
    assert 90 <= body["waited_s"] < 120 and "was granted after waiting" in body["message"]
    assert hit.signed_with(SECRET)


def test_the_wait_before_a_grant_notifies_is_set_per_target(fleet, leases, apply_yaml, receiver) -> None:
    _notify(apply_yaml, receiver.url, "lease.granted", granted_after_s=600)
    pool = fleet(hosts=1)
    [lease] = leases(pool, 1)
    Lease.objects.filter(pk=lease.pk).update(created_at=timezone.now() - timedelta(seconds=90))
    allocation.engine.run_pass([pool.pk])
    notifications_run()
    assert receiver.received == []


def _deliver_until_settled(timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while NotificationDelivery.objects.filter(state="pending").exists() and time.monotonic() < deadline:
        send.deliveries_send()
        time.sleep(0.02)


def test_a_receiver_failing_twice_gets_the_event_once_delivered_with_backoff(fleet, leases, apply_yaml, receiver,
                                                                             monkeypatch) -> None:
    monkeypatch.setattr(send, "BACKOFF_BASE_S", 0.4)
    receiver.statuses = [500, 503]
    _notify(apply_yaml, receiver.url, "lease.preempted")
    pool = fleet(hosts=1)
    [victim] = leases(pool, 1, gpus=8, priority="best-effort")
    allocation.engine.run_pass([pool.pk])
    Lease.objects.filter(pk=victim.pk).update(granted_at=timezone.now() - timedelta(hours=1))
    leases(pool, 1, gpus=8, team="b", priority="high")
    allocation.engine.run_pass([pool.pk])

    notifications_run()
    _deliver_until_settled()

    assert len(receiver.received) == 3
    assert len({r.headers["X-Gpupool-Delivery"] for r in receiver.received}) == 1  # one delivery, three attempts
    assert len({r.body for r in receiver.received}) == 1 and all(r.signed_with(SECRET) for r in receiver.received)
    first, second, third = (r.at for r in receiver.received)
    # Full jitter on the upper half: the first wait is 0.2–0.4 s, the second 0.4–0.8 s.
    assert second - first >= 0.18 and third - second >= 0.38
    [row] = NotificationDelivery.objects.all()
    assert (row.state, row.attempts, row.last_status, row.last_error) == ("delivered", 3, 200, "")


def test_a_delivery_is_given_up_after_the_limit_and_410_disables_the_target(fleet, leases, apply_yaml, receiver,
                                                                            monkeypatch) -> None:
    monkeypatch.setattr(send, "BACKOFF_BASE_S", 0.01)
    monkeypatch.setattr(send, "MAX_ATTEMPTS", 3)
    receiver.statuses = [500] * 10
    _notify(apply_yaml, receiver.url, "lease.preempted")
    _preempt(fleet, leases)
    before = send.DELIVERIES.labels("webhook", "failed")._value.get()
    notifications_run()
    _deliver_until_settled()
    assert len(receiver.received) == 6  # two deliveries, three attempts each
    assert set(NotificationDelivery.objects.values_list("state", "attempts", "last_status")) == {("failed", 3, 500)}
    assert send.DELIVERIES.labels("webhook", "failed")._value.get() - before == 2

    receiver.statuses = [410]
    first, second = NotificationDelivery.objects.order_by("created_at", "id")
    NotificationDelivery.objects.filter(pk=first.pk).update(state="pending", attempts=0, next_attempt_at=timezone.now())
    _deliver_until_settled()
    ops = Notification.objects.get(name="ops")
    assert not ops.enabled and "410 Gone" in ops.disabled_reason
    first.refresh_from_db()
    assert (first.state, first.last_status) == ("failed", 410)
    # Nothing more is sent to a receiver that is gone: neither derived nor retried.
    NotificationDelivery.objects.filter(pk=second.pk).update(state="pending", attempts=0,
                                                             next_attempt_at=timezone.now())
    _deliver_until_settled()
    second.refresh_from_db()
    assert second.state == "failed" and second.last_error.startswith("its target is disabled")
    assert len(receiver.received) == 7
    # Applying the file again enables it again: the file says it is wanted.
    assert any("enabled again" in c for c in apply_yaml(
        f"notifications:\n  - {{name: ops, kind: webhook, url: '{receiver.url}', events: [lease.preempted]}}\n",
        discover=False))


NOW = datetime(2026, 11, 18, 12, 0, tzinfo=UTC)


def test_a_budget_reaching_80_percent_is_told_once_to_the_teams_target(apply_yaml, make_user, api,
                                                                      receiver) -> None:
    from allocation.services.budgets import budgets_refresh

    apply_yaml("pools: [{name: gpus}]\nteams: [{name: a}, {name: b}]\npriority_classes: [{name: default, value: 0}]\n"
               "sources: [{name: sim, kind: simulated, pool: gpus, hosts: 1, gpus_per_host: 4}]\n"
               "budgets: [{team: a, gpu_hours: 10, period: month}]\n")
    apply_yaml(f"notifications:\n  - {{name: a-only, kind: webhook, url: '{receiver.url}', events: [budget.warning], "
               f"teams: [a]}}\n  - {{name: b-only, kind: webhook, url: '{receiver.url}/b', events: [budget.warning], "
               "teams: [b]}\n", discover=False)
    client = api(make_user("ann", teams=("a",)))
    lease = client.post("/api/v1/leases/", {"pool": "gpus", "gpus": 2}, format="json").json()
    allocation.engine.run_pass()
    LeaseUsage.objects.filter(lease_id=lease["id"]).update(started_at=NOW - timedelta(hours=3))
    assert budgets_refresh(now=NOW)["warned"] == 0  # 60%
    assert budgets_refresh(now=NOW + timedelta(hours=1))["warned"] == 1  # 80%
    notifications_run()
    assert budgets_refresh(now=NOW + timedelta(hours=1, minutes=20))["warned"] == 0  # warned already
    notifications_run()

    [hit] = receiver.received
    body = hit.json
    assert body["event"] == "budget.warning" and body["team"] == "a" and body["lease"] is None
    assert body["budget"]["threshold_pct"] == 80 and body["budget"]["gpu_hours"] == 10
    assert body["message"].startswith("team a: 80% of budget") and body["text"].startswith(":moneybag:")
    assert "X-Gpupool-Signature" not in hit.headers  # no secret: unsigned
