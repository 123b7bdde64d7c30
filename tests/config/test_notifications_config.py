"""`notifications:`: parsed with positions and the entry's name in every error, team references
checked, applied idempotently with the secret encrypted, exported without it so that the export
applies as no change, pruned with --prune; users' own subscriptions are never the file's."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from allocation.config import ConfigError, parse_config
from allocation.config.specs import NotificationSpec
from allocation.models import Notification
from inventory.secrets import decrypt
from tests.config.applying import apply_file as _apply

FILE = """\
teams: [{name: vision}, {name: nlp}]
notifications:
  - name: slack-vision
    kind: webhook
    url: https://hooks.example.org/T000/B000
    events: [lease.preempted, lease.granted]
    teams: [vision]
    secret: 0123456789abcdef0123
    granted_after_s: 120
  - {name: oncall, kind: email, to: [oncall@example.org, ops@example.org], events: [budget.warning, lease.lost]}
  - {name: relay, kind: webhook, url: "http://relay.internal:8080/in", events: [lease.expiring],
     secret_env: GPUPOOL_RELAY_SECRET, expiring_before_s: 900}
"""


def test_notifications_are_parsed_into_the_specs() -> None:
    cfg = parse_config(FILE, "c.yaml")
    assert cfg.notifications == [
        NotificationSpec("slack-vision", "webhook", ("lease.granted", "lease.preempted"),
                         url="https://hooks.example.org/T000/B000", teams=("vision",), secret="0123456789abcdef0123",
                         granted_after_s=120.0),
        NotificationSpec("oncall", "email", ("lease.lost", "budget.warning"),
                         to=("oncall@example.org", "ops@example.org")),
        NotificationSpec("relay", "webhook", ("lease.expiring",), url="http://relay.internal:8080/in",
                         secret_env="GPUPOOL_RELAY_SECRET", expiring_before_s=900.0),
    ]


@pytest.mark.parametrize(("entry", "message"), [
    ("{name: x, kind: sms, to: a@b.org, events: [lease.lost]}",
     "c.yaml:2:21: notification 'x': kind must be one of webhook, email, got 'sms'"),
    ("{name: x, kind: webhook, url: 'ftp://h/x', events: [lease.lost]}",
     "c.yaml:2:35: notification 'x': url must be an http(s) URL with a host, got 'ftp://h/x'"),
    ("{name: x, kind: webhook, url: 'https://u:p@h/x', events: [lease.lost]}",
     "c.yaml:2:35: notification 'x': url must not carry credentials"),
    ("{name: x, kind: webhook, to: a@b.org, events: [lease.lost]}",
     "c.yaml:2:34: notification 'x': a webhook target takes `url`, not `to`"),
    ("{name: x, kind: email, to: [not-an-address], events: [lease.lost]}",
     "c.yaml:2:32: notification 'x': to: not an e-mail address: 'not-an-address'"),
    ("{name: x, kind: email, to: a@b.org, events: [lease.lost], secret: 0123456789abcdef}",
     "c.yaml:2:71: notification 'x': an email target is not signed"),
    ("{name: x, kind: webhook, url: 'https://h/x', events: [lease.granted, lease.exploded]}",
     "c.yaml:2:58: notification 'x': unknown event(s) 'lease.exploded' (allowed: lease.granted, lease.expiring, "
     "lease.preempted, lease.lost, budget.warning, lease.idle)"),
    ("{name: x, kind: webhook, url: 'https://h/x', events: []}",
     "c.yaml:2:58: notification 'x': events must be a non-empty list"),
    ("{name: x, kind: webhook, url: 'https://h/x', events: [lease.lost], secret: short}",
     "c.yaml:2:80: notification 'x': secret must be a string of 16 to 256 characters"),
    ("{name: x, kind: webhook, url: 'https://h/x', events: [lease.lost], secret: 0123456789abcdef, secret_env: K}",
     "c.yaml:2:110: notification 'x': give `secret` or `secret_env`, not both"),
    ("{name: x, kind: webhook, url: 'https://h/x', events: [lease.lost], granted_after_s: -1}",
     "c.yaml:2:89: notification 'x': granted_after_s must be a number of seconds between 0 and 2592000, got -1"),
    ("{name: x, kind: webhook, url: 'https://h/x', events: [lease.lost], teams: vision}",
     "c.yaml:2:79: notification 'x': teams must be a list of team names, got 'vision'"),
    ("{name: x, kind: webhook, events: [lease.lost], channel: '#ops'}",
     "c.yaml:2:61: unknown key 'channel' (allowed: events, expiring_before_s, granted_after_s, kind, name, secret, "
     "secret_env, teams, to, url)"),
    ("{name: x, kind: webhook}", "c.yaml:2:5: missing required key 'events'"),
])
def test_bad_entries_are_refused_naming_the_entry_the_field_and_its_position(entry: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(f"notifications:\n  - {entry}\n", "c.yaml")
    assert any(e.startswith(message) for e in err.value.errors), err.value.errors


def test_two_entries_of_one_name_are_refused() -> None:
    text = "notifications:\n" + "  - {name: x, kind: email, to: a@b.org, events: [lease.lost]}\n" * 2
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    assert err.value.errors == ["c.yaml:3:5: duplicate notification 'x'"]


@pytest.mark.django_db
def test_a_notification_of_an_undefined_team_is_refused_and_nothing_is_applied(tmp_path: Path) -> None:
    text = "notifications:\n  - {name: x, kind: email, to: a@b.org, events: [lease.lost], teams: [ghosts]}\n"
    with pytest.raises(CommandError, match="notification 'x': team 'ghosts' is not defined"):
        _apply(tmp_path, text)
    assert not Notification.objects.exists()


@pytest.mark.django_db
def test_apply_is_idempotent_encrypts_the_secret_and_the_export_applies_as_no_change(tmp_path: Path,
                                                                                      make_user) -> None:
    first = _apply(tmp_path, FILE)
    assert "+ notification slack-vision (webhook https://hooks.example.org/T000/B000): lease.granted, " \
           "lease.preempted" in first
    assert "+ notification oncall (email oncall@example.org, ops@example.org)" in first
    assert "no change" in _apply(tmp_path, FILE).lower()
    row = Notification.objects.get(name="slack-vision")
    assert row.secret != "0123456789abcdef0123" and decrypt(row.secret) == "0123456789abcdef0123"
    assert row.granted_after_s == 120 and row.teams == ["vision"] and row.user is None

    out = StringIO()
    call_command("export", stdout=out)
    exported = yaml.safe_load(out.getvalue())
    assert exported["notifications"] == [
        {"name": "oncall", "kind": "email", "to": ["oncall@example.org", "ops@example.org"],
         "events": ["lease.lost", "budget.warning"]},
        {"name": "relay", "kind": "webhook", "url": "http://relay.internal:8080/in", "events": ["lease.expiring"],
         "secret_env": "GPUPOOL_RELAY_SECRET", "expiring_before_s": 900},
        {"name": "slack-vision", "kind": "webhook", "url": "https://hooks.example.org/T000/B000",
         "events": ["lease.granted", "lease.preempted"], "teams": ["vision"], "granted_after_s": 120},
    ]
    assert "0123456789abcdef0123" not in out.getvalue()  # secrets are never exported
    assert "no change" in _apply(tmp_path, out.getvalue(), "--prune").lower()
    assert decrypt(Notification.objects.get(name="slack-vision").secret) == "0123456789abcdef0123"  # kept


@pytest.mark.django_db
def test_a_changed_entry_is_updated_and_a_removed_one_deleted_with_prune_only(tmp_path: Path, make_user) -> None:
    _apply(tmp_path, FILE)
    Notification.objects.create(name="mine", user=make_user("ann"), kind="email", to=["ann@example.org"],
                                events=["lease.granted"])
    changed = FILE.replace("granted_after_s: 120", "granted_after_s: 30").replace("0123456789abcdef0123",
                                                                                  "a-new-secret-of-twenty")
    out = _apply(tmp_path, changed)
    assert "~ notification slack-vision: granted_after_s 120.0 → 30.0, secret replaced" in out
    only_oncall = "teams: [{name: vision}, {name: nlp}]\nnotifications:\n" \
                  "  - {name: oncall, kind: email, to: [oncall@example.org, ops@example.org], " \
                  "events: [budget.warning, lease.lost]}\n"
    assert "- notification" not in _apply(tmp_path, only_oncall)  # without --prune nothing goes
    pruned = _apply(tmp_path, only_oncall, "--prune")
    assert "- notification relay" in pruned and "- notification slack-vision" in pruned
    assert sorted(Notification.objects.values_list("name", flat=True)) == ["mine", "oncall"]  # ann's stays
