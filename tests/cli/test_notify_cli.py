"""`gpupool notify`: a user's own subscriptions through the API. Short event names become the
API's, the webhook's secret comes from an environment variable (never the command line), the same
name again replaces, `ls` and `rm NAME`; and a subscription made by the CLI is heard: a real
receiver gets one signed `lease.granted` for a lease granted after a wait."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from allocation.engine import run_pass
from allocation.models import Lease, Notification
from allocation.notify.run import notifications_run
from gpupool_cli.notify import event_names
from inventory.secrets import decrypt
from tests.support.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.django_db(transaction=True)
SECRET = "a-secret-of-more-than-16-chars"


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver().start()
    yield server
    server.stop()


def test_short_event_names_become_the_apis() -> None:
    assert event_names("granted, preempted,lease.lost") == ["lease.granted", "lease.preempted", "lease.lost"]
    assert event_names("all")[-1] == "budget.warning" and len(event_names("all,granted")) == 6


def test_notify_subscribes_lists_replaces_and_removes(server: Any, receiver: WebhookReceiver,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    get_user_model().objects.filter(username="alice").update(email="alice@example.org")
    code, _, err = server.run("notify", "--on", "granted,preempted", "--webhook", receiver.url,
                              "--secret-env", "HOOK_SECRET", "--name", "hook")
    assert code == 0, err
    row = Notification.objects.get()
    assert (row.name, row.kind, row.url, row.events) == ("hook", "webhook", receiver.url,
                                                         ["lease.granted", "lease.preempted"])
    assert decrypt(row.secret) == SECRET

    code, out, _ = server.run("notify", "--on", "lost", "--webhook", receiver.url, "--name", "hook")
    assert code == 0 and "subscription 'hook' replaced: webhook to" in out, _
    assert Notification.objects.get().events == ["lease.lost"]

    code, _, err = server.run("notify", "--on", "expiring", "--email", "--name", "mail")
    assert code == 0, err
    code, out, _ = server.run("notify", "ls")
    assert code == 0 and out.splitlines()[0].split() == ["NAME", "KIND", "TO", "EVENTS", "SIGNED", "ENABLED"]
    assert any(line.split()[:3] == ["mail", "email", "alice@example.org"] for line in out.splitlines()), out
    listed = json.loads(server.run("notify", "ls", "-o", "json")[1])
    assert [s["name"] for s in listed] == ["hook", "mail"]

    assert server.run("notify", "rm", "hook")[0] == 0
    code, _, err = server.run("notify", "rm", "hook")
    assert code == 3 and "no subscription 'hook' of yours" in err
    assert list(Notification.objects.values_list("name", flat=True)) == ["mail"]


def test_notify_refusals_are_usage_errors_or_the_servers_words(server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert server.run("notify", "--on", "granted")[0] == 2  # no target
    code, _, err = server.run("notify", "--on", "won", "--webhook", "https://x.example/y")
    assert code == 2 and "unknown event 'won'" in err
    code, _, err = server.run("notify", "--on", "granted", "--webhook", "https://x.example/y",
                              "--secret-env", "NOT_SET_HERE")
    assert code == 2 and "NOT_SET_HERE: that variable is not set" in err
    code, _, err = server.run("notify", "--on", "granted", "--webhook", "ftp://x.example/y")
    assert code == 1 and "url" in err  # the server's 400 names the field
    code, _, err = server.run("notify", "--on", "lost", "--email", "boss@example.org")
    assert code == 3 and "(not_your_address)" in err
    code, _, err = server.run("notify", "--on", "lost", "--email")  # alice has no address here
    assert code == 1 and "your account has no e-mail address" in err


def test_a_subscription_made_by_the_cli_is_heard_by_a_real_receiver(server: Any, receiver: WebhookReceiver,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    assert server.run("notify", "--on", "granted", "--webhook", receiver.url, "--secret-env", "HOOK_SECRET")[0] == 0
    code, out, err = server.run("request", "--pool", "training", "--gpus", "1", "-o", "json")
    assert code == 0, err
    lease_id = json.loads(out)["id"]
    Lease.objects.filter(pk=lease_id).update(created_at=timezone.now() - timedelta(seconds=90))  # a long wait
    run_pass()
    notifications_run()
    [hit] = receiver.received
    assert hit.json["event"] == "lease.granted" and hit.json["lease"]["id"] == lease_id
    assert hit.signed_with(SECRET)
