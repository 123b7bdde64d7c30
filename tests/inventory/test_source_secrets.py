"""The secrets a connector declares (`secret_fields`) are stored encrypted apart from the config,
handed back to the connector on discovery, and never exported."""

from __future__ import annotations

import pytest

from agents.base import Connector, Discovery
from allocation.config import parse_config
from allocation.config.apply import config_apply, config_export
from inventory import secrets
from inventory.discovery import source_connector
from inventory.models import Host, Source
from inventory.secrets import (
    decrypt,
    source_secrets_merge,
    source_secrets_open,
    source_secrets_seal,
    source_secrets_split,
)
from tests.support.sshd import new_ed25519

PUBLIC = new_ed25519()[1]


def ssh_yaml(private_key: str) -> str:
    key = private_key.replace("\n", "\\n")
    return (f'pools:\n  - {{name: p}}\nsources:\n  - {{name: lab, kind: ssh, pool: p, user: gpu, private_key: "{key}",'
            f' hosts: [{{address: 10.0.0.5, host_key: "{PUBLIC}"}}]}}\n')


class TwoSecrets(Connector):
    # No `kind`: a test double, never registered.
    secret_fields = ("token", "password")

    def discover(self) -> Discovery:
        return Discovery()


def test_an_ssh_key_is_split_off_and_stored_as_its_bare_value() -> None:
    options, found = source_secrets_split("ssh", {"user": "gpu", "private_key": "PEM"})
    assert (options, found) == ({"user": "gpu"}, {"private_key": "PEM"})
    token = source_secrets_seal("ssh", found)
    assert "PEM" not in token and decrypt(token) == "PEM"  # the format of every row written so far
    assert source_secrets_open("ssh", token) == {"private_key": "PEM"}


def test_kinds_without_secrets_store_nothing() -> None:
    assert source_secrets_split("simulated", {"hosts": 2}) == ({"hosts": 2}, {})
    assert source_secrets_seal("simulated", {}) == "" and source_secrets_open("simulated", "") == {}


def test_several_secrets_are_stored_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secrets, "connector_class", lambda kind: TwoSecrets)
    options, found = source_secrets_split("vault", {"url": "u", "token": "t", "password": "p"})
    assert (options, found) == ({"url": "u"}, {"token": "t", "password": "p"})
    assert source_secrets_open("vault", source_secrets_seal("vault", found)) == found


def test_a_secret_inside_a_nested_entry_is_split_off_and_merged_back_where_it_was() -> None:
    given = {"in_cluster": True, "telemetry": {"prometheus_url": "http://p", "token": "t"}}
    options, found = source_secrets_split("kubernetes", given)
    assert (options, found) == ({"in_cluster": True, "telemetry": {"prometheus_url": "http://p"}},
                                {"telemetry.token": "t"})
    assert given["telemetry"] == {"prometheus_url": "http://p", "token": "t"}  # the caller's entry is untouched
    assert source_secrets_open("kubernetes", source_secrets_seal("kubernetes", found)) == found
    assert source_secrets_merge(options, found) == given and options["telemetry"] == {"prometheus_url": "http://p"}
    # The entry went from the config (or is no mapping): its secret is not put back.
    assert source_secrets_merge({"in_cluster": True}, found) == {"in_cluster": True}
    assert source_secrets_merge({"telemetry": "x"}, found) == {"telemetry": "x"}
    assert source_secrets_split("kubernetes", {"telemetry": "x"}) == ({"telemetry": "x"}, {})


@pytest.mark.django_db
def test_apply_encrypts_the_key_and_discovery_hands_it_back() -> None:
    private, _ = new_ed25519()
    changes = config_apply(parse_config(ssh_yaml(private), "f.yaml"))
    assert "+ source lab (ssh)" in changes
    source = Source.objects.get(name="lab")
    assert "private_key" not in source.config and private not in source.secret
    assert source_connector(source).config["private_key"] == private
    assert "private_key" not in str(config_export())
    assert config_apply(parse_config(ssh_yaml(private), "f.yaml")) == []  # same key: no change
    other, _ = new_ed25519()
    assert "~ source lab: private key replaced" in config_apply(parse_config(ssh_yaml(other), "f.yaml"))
    assert source_connector(Source.objects.get(name="lab")).config["private_key"] == other


@pytest.mark.django_db
def test_the_key_is_in_no_log_line_and_no_audit_event(caplog: pytest.LogCaptureFixture) -> None:
    """Applying, replacing and using a key (a discovery that fails to connect) at DEBUG level:
    the key material shows up nowhere an operator or an auditor reads."""
    import logging

    from allocation.models import AuditEvent
    from inventory.discovery import source_discover

    first, second = new_ed25519()[0], new_ed25519()[0]
    with caplog.at_level(logging.DEBUG):
        config_apply(parse_config(ssh_yaml(first), "f.yaml"))
        config_apply(parse_config(ssh_yaml(second), "f.yaml"))
        source = Source.objects.get(name="lab")
        source.config = {**source.config, "connect_timeout": 1, "hosts": [{"address": "127.0.0.1", "port": 9,
                                                                           "host_key": PUBLIC}]}
        source.save(update_fields=["config"])
        source_discover(source=source)  # nothing listens on port 9: the failure is recorded
    source.refresh_from_db()
    assert source.last_error or Host.objects.filter(source=source).exclude(error="").exists()
    audit = str(list(AuditEvent.objects.values("data", "message")))
    for key in (first, second):
        inner = "".join(key.splitlines()[1:-1])
        assert inner[:40] not in caplog.text and inner[:40] not in audit
    assert "lab" in audit  # the events exist, only without the key
