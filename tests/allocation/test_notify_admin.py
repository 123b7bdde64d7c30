"""The notifications in the Django admin: the delivery log and the targets for pool admins, a
target's secret never shown, a 410-disabled target enabled again (audited), failed deliveries made
due again."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from allocation.models import AuditEvent, Notification, NotificationDelivery
from inventory.secrets import encrypt

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(make_user: Any, client: Any) -> Any:
    client.force_login(make_user("root", admin=True))
    return client


def test_admins_see_targets_without_their_secret_and_enable_a_disabled_one(root: Any) -> None:
    hook = Notification.objects.create(name="ops", kind="webhook", url="https://h/x", events=["lease.lost"],
                                       secret=encrypt("0123456789abcdef"), enabled=False,
                                       disabled_reason="the receiver answered 410 Gone")
    page = root.get(reverse("admin:allocation_notification_change", args=[hook.pk])).content.decode()
    assert "https://h/x" in page and hook.secret not in page and "0123456789abcdef" not in page
    answer = root.post(reverse("admin:allocation_notification_changelist"),
                       {"action": "enable_notifications", "_selected_action": [hook.pk]})
    assert answer.status_code == 302
    hook.refresh_from_db()
    assert hook.enabled and hook.disabled_reason == ""
    assert AuditEvent.objects.get(action="notification.enable").actor == "root"


def test_failed_deliveries_are_listed_and_made_due_again(root: Any) -> None:
    hook = Notification.objects.create(name="ops", kind="webhook", url="https://h/x", events=["lease.lost"])
    failed = NotificationDelivery.objects.create(notification=hook, target="ops", kind="webhook", event="lease.lost",
                                                 event_key="lease-event-7", occurred_at=timezone.now(),
                                                 state="failed", attempts=10, last_error="HTTP 500: oops")
    listing = root.get(reverse("admin:allocation_notificationdelivery_changelist"), {"state": "failed"})
    assert "HTTP 500: oops" in listing.content.decode()
    root.post(reverse("admin:allocation_notificationdelivery_changelist"),
              {"action": "retry_deliveries", "_selected_action": [failed.pk]})
    failed.refresh_from_db()
    assert (failed.state, failed.attempts, failed.last_error) == ("pending", 0, "")


def test_old_delivered_rows_and_dispatched_facts_are_pruned_pending_ones_kept() -> None:
    from datetime import timedelta

    from allocation.models import NotificationEvent
    from allocation.notify.send import deliveries_prune

    long_ago = timezone.now() - timedelta(days=40)
    common = {"target": "ops", "kind": "webhook", "event": "lease.lost", "occurred_at": long_ago,
              "created_at": long_ago}
    NotificationDelivery.objects.create(event_key="a", state="delivered", **common)
    kept = NotificationDelivery.objects.create(event_key="b", state="pending", **common)
    NotificationEvent.objects.create(event="budget.warning", key="k1", dispatched_at=long_ago)
    NotificationEvent.objects.create(event="budget.warning", key="k2")  # not dispatched yet
    assert deliveries_prune() == 2
    assert list(NotificationDelivery.objects.values_list("pk", flat=True)) == [kept.pk]
    assert list(NotificationEvent.objects.values_list("key", flat=True)) == ["k2"]
