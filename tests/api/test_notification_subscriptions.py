"""`notifications/subscriptions/` (what `gpupool notify --on granted,preempted` calls) and
`notifications/deliveries/`: a user's own webhook or e-mail, replaced by sending the same name
again, e-mail to the user's own address only, errors naming the field; a subscription hears of the
user's own leases only; the delivery log, filtered, for admins and for a subscription's owner."""

from __future__ import annotations

from typing import Any

import pytest

from allocation.engine import run_pass
from allocation.models import Lease, Notification, NotificationDelivery
from allocation.notify.dispatch import notifications_dispatch
from inventory.secrets import decrypt

pytestmark = pytest.mark.django_db
URL = "/api/v1/notifications/subscriptions/"
HOOK = {"kind": "webhook", "url": "https://hooks.example.org/mine", "events": ["lease.preempted", "lease.granted"],
        "secret": "0123456789abcdef-mine"}


@pytest.fixture
def alice(make_user: Any, api: Any) -> Any:
    user = make_user("alice", teams=("vision",))
    user.email = "alice@example.org"
    user.save()
    return api(user)


def test_a_user_subscribes_a_webhook_and_sending_it_again_replaces_it(alice: Any) -> None:
    made = alice.post(URL, HOOK, format="json")
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["name"] == "default" and body["events"] == ["lease.granted", "lease.preempted"]
    assert body["signed"] is True and "secret" not in body and body["granted_after_s"] == 60
    again = alice.post(URL, {**HOOK, "events": ["lease.lost"], "granted_after_s": 5}, format="json")
    assert again.status_code == 200 and again.json()["id"] == body["id"] and again.json()["events"] == ["lease.lost"]
    row = Notification.objects.get(pk=body["id"])
    assert decrypt(row.secret) == HOOK["secret"] and row.user is not None and row.user.username == "alice"
    assert [s["id"] for s in alice.get(URL).json()["results"]] == [body["id"]]
    assert alice.delete(f"{URL}{body['id']}/").status_code == 204
    assert not Notification.objects.exists()


def test_email_goes_to_the_users_own_address_only(alice: Any, make_user: Any, api: Any) -> None:
    mine = alice.post(URL, {"name": "mail", "kind": "email", "events": ["lease.expiring"]}, format="json")
    assert mine.status_code == 201 and mine.json()["to"] == ["alice@example.org"]
    other = alice.post(URL, {"name": "x", "kind": "email", "to": ["boss@example.org"], "events": ["lease.lost"]},
                       format="json")
    assert other.status_code == 403 and other.json()["code"] == "not_your_address"
    root = api(make_user("root", admin=True))
    assert root.post(URL, {"kind": "email", "to": ["oncall@example.org"], "events": ["lease.lost"]},
                     format="json").status_code == 201


@pytest.mark.parametrize(("body", "field"), [
    ({"kind": "webhook", "url": "ftp://x/y", "events": ["lease.lost"]}, "url"),
    ({"kind": "webhook", "events": ["lease.lost"]}, "url"),
    ({"kind": "webhook", "url": "https://x/y", "events": ["lease.won"]}, "events"),
    ({"kind": "webhook", "url": "https://x/y", "events": ["lease.lost"], "secret": "short"}, "secret"),
    ({"kind": "pager", "events": ["lease.lost"]}, "kind"),
    ({"kind": "webhook", "url": "https://x/y", "events": ["lease.lost"], "channel": "#ops"}, "channel"),
])
def test_a_bad_subscription_is_a_400_naming_the_field(alice: Any, body: dict[str, Any], field: str) -> None:
    answer = alice.post(URL, body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in str(answer.json()), answer.json()


def test_a_subscription_hears_of_its_users_leases_only(demo_fleet: Any, alice: Any, make_user: Any,
                                                        api: Any) -> None:
    alice.post(URL, {**HOOK, "events": ["lease.granted"], "granted_after_s": 0}, format="json")
    bob = api(make_user("bob", teams=("vision",)))
    mine = alice.post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json").json()["id"]
    bob.post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json")
    run_pass()
    assert Lease.objects.filter(state="granted").count() == 2
    notifications_dispatch()
    [delivery] = NotificationDelivery.objects.all()
    assert str(delivery.lease_id) == mine and delivery.target == "alice/default"

    listed = alice.get("/api/v1/notifications/deliveries/?event=lease.granted&state=pending").json()["results"]
    assert [d["id"] for d in listed] == [str(delivery.pk)] and listed[0]["payload"]["lease"]["id"] == mine
    assert bob.get("/api/v1/notifications/deliveries/").json()["results"] == []
    root = api(make_user("root", admin=True))
    assert root.get(f"/api/v1/notifications/deliveries/?lease={mine}").json()["count"] == 1
    assert root.get("/api/v1/notifications/deliveries/?state=delivered").json()["count"] == 0
