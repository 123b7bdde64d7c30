"""The two ways a notification leaves: a signed JSON POST, an e-mail through Django's mail backend.
One base class, one verb (`send`), one exception; each send is bounded in time (STYLE #8, #9)."""

from __future__ import annotations

import hashlib
import hmac
import os
import smtplib
from typing import Any, ClassVar

import requests
from django.core.mail import EmailMessage, get_connection

from allocation.models import Notification, NotificationDelivery
from allocation.notify_vocabulary import EMAIL, WEBHOOK
from inventory.secrets import decrypt

SIGNATURE = "X-Gpupool-Signature"
DELIVERY = "X-Gpupool-Delivery"
EVENT = "X-Gpupool-Event"


class TransportError(Exception):
    """A send that failed: `status` is the receiver's HTTP status (None: no answer), `gone` a 410
    (the receiver asks not to be sent to again), `permanent` a failure no retry can mend."""

    def __init__(self, message: str, *, status: int | None = None, permanent: bool = False) -> None:
        super().__init__(message)
        self.message, self.status, self.permanent = message, status, permanent

    @property
    def gone(self) -> bool:
        return self.status == 410


class Transport:
    kind: ClassVar[str]

    def send(self, target: Notification, delivery: NotificationDelivery, body: bytes) -> int | None:
        """Send one delivery's `body`; returns the receiver's status (None for e-mail) or raises
        TransportError."""
        raise NotImplementedError


def signature(secret: str, body: bytes) -> str:
    """The `X-Gpupool-Signature` value: `sha256=` and the hex HMAC-SHA256 of the raw body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def target_secret(target: Notification) -> str:
    """The target's signing key ("" unsigned): stored (decrypted here), or read from the sending
    process's environment (`secret_env`)."""
    if target.secret_env:
        value = os.environ.get(target.secret_env, "")
        if not value:
            raise TransportError(f"secret_env {target.secret_env} is not set in the sending worker's environment")
        return value
    return decrypt(target.secret) if target.secret else ""


class Webhook(Transport):
    kind = WEBHOOK
    # Connect, read: a receiver that does not answer within these is retried later, never waited for.
    TIMEOUT_S = (3.0, 5.0)

    def send(self, target: Notification, delivery: NotificationDelivery, body: bytes) -> int | None:
        headers = {"Content-Type": "application/json", "User-Agent": "gpupool-notify/1",
                   EVENT: delivery.event, DELIVERY: str(delivery.id)}
        secret = target_secret(target)
        if secret:
            headers[SIGNATURE] = signature(secret, body)
        try:
            # No redirects: a 30x would turn the POST into a GET somewhere the target did not name.
            answer = requests.post(target.url, data=body, headers=headers, timeout=self.TIMEOUT_S,
                                   allow_redirects=False)
        except requests.RequestException as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}"[:500]) from None
        if 200 <= answer.status_code < 300:
            return answer.status_code
        raise TransportError(f"HTTP {answer.status_code}: {answer.text[:200]}", status=answer.status_code)


class Email(Transport):
    kind = EMAIL
    TIMEOUT_S = 10.0

    def send(self, target: Notification, delivery: NotificationDelivery, body: bytes) -> int | None:
        payload: dict[str, Any] = delivery.payload
        subject = f"[gpupool] {delivery.event}: {payload.get('message', '')}"[:200]
        text = f"{payload.get('message', '')}\n\n--\nevent {delivery.event_key}, delivery {delivery.id}\n"
        message = EmailMessage(subject.replace("\n", " "), text, to=list(target.to),
                               headers={DELIVERY: str(delivery.id), EVENT: delivery.event},
                               connection=get_connection(timeout=self.TIMEOUT_S))
        try:
            message.send()
        except smtplib.SMTPRecipientsRefused as exc:
            raise TransportError(f"recipients refused: {exc.recipients}"[:500], permanent=True) from None
        except (smtplib.SMTPException, OSError) as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}"[:500]) from None
        return None


TRANSPORTS: dict[str, Transport] = {t.kind: t for t in (Webhook(), Email())}
