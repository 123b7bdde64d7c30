"""E-mail through Django's SMTP backend to a real SMTP server (aiosmtpd) on loopback: a user's own
subscription hears `lease.expiring` once per expiry time (a renewal arms it again) and of nobody
else's lease; a configured e-mail target hears a team's idle warnings."""

from __future__ import annotations

import email
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.utils import timezone

from allocation.engine import run_pass
from allocation.models import Lease, LeaseGpu, Notification
from allocation.notify.dispatch import expiring_dispatch
from allocation.notify.run import notifications_run
from allocation.notify.send import deliveries_send
from allocation.services.idle import leases_idle_check
from inventory.models import GpuSample
from stacktools.ready import free_port

pytestmark = pytest.mark.django_db


class Sink:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append((envelope.rcpt_tos, email.message_from_bytes(envelope.content)))
        return "250 OK"


@pytest.fixture
def smtp(settings: Any) -> Iterator[Sink]:
    sink = Sink()
    controller = Controller(sink, hostname="127.0.0.1", port=free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    settings.DEFAULT_FROM_EMAIL = "gpupool@example.org"
    yield sink
    controller.stop()


FLEET = """
pools: [{name: gpus, idle_reclaim: {below_util_pct: 5, for_s: 600, warn_s: 120}}]
teams: [{name: a}, {name: b}]
priority_classes: [{name: default, value: 0}]
sources: [{name: sim, kind: simulated, pool: gpus, hosts: 1, gpus_per_host: 4}]
"""


def _granted(client: Any, gpus: int = 1) -> Lease:
    lease = client.post("/api/v1/leases/", {"pool": "gpus", "gpus": gpus}, format="json").json()
    run_pass()
    Lease.objects.filter(pk=lease["id"]).update(granted_at=timezone.now() - timedelta(hours=2))
    return Lease.objects.get(pk=lease["id"])


def test_a_users_expiring_lease_is_told_once_per_expiry_time_and_again_after_a_renewal(apply_yaml, make_user, api,
                                                                                   smtp) -> None:
    apply_yaml(FLEET)
    ann, bob = make_user("ann", teams=("a",)), make_user("bob", teams=("a",))
    Notification.objects.create(name="mine", user=ann, kind="email", to=["ann@example.org"],
                                events=["lease.expiring"], expiring_before_s=600)
    mine, bobs = _granted(api(ann)), _granted(api(bob))
    soon = timezone.now() + timedelta(minutes=5)
    Lease.objects.filter(pk__in=[mine.pk, bobs.pk]).update(expires_at=soon)

    assert expiring_dispatch() == 1  # ann's lease only: bob's is not hers
    assert expiring_dispatch() == 0  # once per expiry time
    assert deliveries_send() == {"delivered": 1}
    [(rcpt, message)] = smtp.messages
    assert rcpt == ["ann@example.org"] and message["X-Gpupool-Event"] == "lease.expiring"
    assert message["Subject"].startswith(f"[gpupool] lease.expiring: lease {str(mine.pk)[:8]} of ann")
    assert "expires in 4 min" in message.get_payload() or "expires in 5 min" in message.get_payload()

    # Renewed: a new expiry time, told again when it nears; a far one is not told yet.
    Lease.objects.filter(pk=mine.pk).update(expires_at=soon + timedelta(minutes=3))
    assert expiring_dispatch() == 1
    Lease.objects.filter(pk=mine.pk).update(expires_at=soon + timedelta(hours=1))
    assert expiring_dispatch() == 0
    deliveries_send()
    assert len(smtp.messages) == 2


def test_a_lease_shorter_than_the_notice_is_not_told_it_expires(apply_yaml, make_user, api, smtp) -> None:
    apply_yaml(FLEET)
    ann = make_user("ann", teams=("a",))
    Notification.objects.create(name="mine", user=ann, kind="email", to=["ann@example.org"],
                                events=["lease.expiring"], expiring_before_s=600)
    lease = _granted(api(ann))
    now = timezone.now()
    Lease.objects.filter(pk=lease.pk).update(granted_at=now, expires_at=now + timedelta(minutes=5))
    assert expiring_dispatch() == 0


def test_a_teams_idle_warning_reaches_the_configured_email_target(apply_yaml, make_user, api, smtp) -> None:
    apply_yaml(FLEET)
    apply_yaml("notifications:\n  - {name: ops-mail, kind: email, to: ops@example.org, events: [lease.idle], "
               "teams: [a]}\n", discover=False)
    GpuSample.objects.all().delete()
    lease = _granted(api(make_user("ann", teams=("a",))), gpus=2)
    now = timezone.now().replace(microsecond=0)
    samples = []
    for gpu_id in LeaseGpu.objects.filter(lease_id=lease.pk, active=True).values_list("gpu_id", flat=True):
        samples += [GpuSample(gpu_id=gpu_id, at=now - timedelta(minutes=m), utilization_pct=1.0) for m in range(16)]
    GpuSample.objects.bulk_create(samples)
    assert leases_idle_check(now=now)["warned"] == 1
    assert leases_idle_check(now=now + timedelta(seconds=30))["warned"] == 0

    counts = notifications_run()
    assert counts["derived"] == 1 and counts["delivered"] == 1
    [(rcpt, message)] = smtp.messages
    assert rcpt == ["ops@example.org"] and message["X-Gpupool-Event"] == "lease.idle"
    assert "below 5% utilisation" in message.get_payload()
