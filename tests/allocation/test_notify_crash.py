"""A sender killed (SIGKILL) while its POST is in flight: the receiver has the event, the record of
it was never written. Once the dead sender's claim lapses the event is sent again with the same
delivery id (the receiver can drop the repeat), recorded once, and never sent a third time."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from django.utils import timezone

from allocation.models import Notification, NotificationDelivery
from allocation.notify import send
from tests.support.processes import process_env
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.django_db(transaction=True)

_SENDER = """
import django
django.setup()
import allocation.notify.send as send
send.CLAIM_S = 3.0
send.deliveries_send()
"""


def test_a_sender_killed_mid_delivery_redelivers_once_with_the_same_delivery_id() -> None:
    receiver = WebhookReceiver().start()
    try:
        target = Notification.objects.create(name="ops", kind="webhook", url=receiver.url, events=["lease.lost"])
        delivery = NotificationDelivery.objects.create(
            notification=target, target="ops", kind="webhook", event="lease.lost", event_key="lease-event-1",
            payload={"event": "lease.lost", "delivery_id": "x"}, occurred_at=timezone.now())
        receiver.hold.clear()  # the first POST is held open
        sender = subprocess.Popen([sys.executable, "-c", _SENDER], env=process_env(), stderr=subprocess.PIPE)
        assert receiver.arrived.wait(30), "the sender never posted"
        sender.send_signal(signal.SIGKILL)
        assert sender.wait(10) == -signal.SIGKILL
        receiver.hold.set()
        delivery.refresh_from_db()
        assert (delivery.state, delivery.attempts) == ("pending", 1)  # claimed, never recorded

        assert send.deliveries_send() == {}  # its claim (3 s) still stands: nobody sends it yet
        deadline, outcome = time.monotonic() + 15, dict[str, int]()
        while not outcome and time.monotonic() < deadline:
            time.sleep(0.1)
            outcome = send.deliveries_send()
        assert outcome == {"delivered": 1}
        assert send.deliveries_send() == {}

        assert len(receiver.received) == 2
        assert {r.headers["X-Gpupool-Delivery"] for r in receiver.received} == {str(delivery.pk)}
        assert receiver.received[0].body == receiver.received[1].body
        delivery.refresh_from_db()
        assert (delivery.state, delivery.attempts) == ("delivered", 2)
    finally:
        receiver.hold.set()
        receiver.stop()
