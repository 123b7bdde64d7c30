"""`sources[].telemetry` of a kubernetes source: validated on apply, its token and password stored
encrypted apart from the config and handed back to the connector, never exported; `export` →
`apply` round-trips it without a change."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from allocation.config import ConfigError, parse_config
from allocation.config.apply import config_apply
from inventory.discovery import source_connector
from inventory.models import Source
from inventory.secrets import decrypt

pytestmark = pytest.mark.django_db


def config(**telemetry: object) -> str:
    return json.dumps({"pools": [{"name": "p"}], "sources": [
        {"name": "kA", "kind": "kubernetes", "pool": "p", "in_cluster": True,
         "telemetry": {"prometheus_url": "https://prom.monitoring:9090", "selector": 'cluster="kA"', **telemetry}}]})


def export() -> str:
    out = StringIO()
    call_command("export", stdout=out)
    return out.getvalue()


def test_the_token_is_stored_encrypted_handed_to_the_connector_and_never_exported() -> None:
    assert "+ source kA (kubernetes)" in config_apply(parse_config(config(token="s3cret-token"), "f.yaml"))
    source = Source.objects.get(name="kA")
    assert source.config["telemetry"] == {"prometheus_url": "https://prom.monitoring:9090",
                                          "selector": 'cluster="kA"'}
    assert "s3cret-token" not in source.secret and "s3cret-token" in decrypt(source.secret)
    telemetry = source_connector(source).telemetry  # type: ignore[attr-defined]
    assert telemetry is not None and telemetry.config.token == "s3cret-token"
    assert telemetry.config.selector == 'cluster="kA"'

    exported = export()
    assert "s3cret" not in exported and "token" not in exported
    assert "prometheus_url: https://prom.monitoring:9090" in exported
    # What export prints applies back without a change, and the stored token stays.
    assert config_apply(parse_config(exported, "export.yaml")) == []
    assert source_connector(Source.objects.get(name="kA")).telemetry.config.token == "s3cret-token"  # type: ignore[attr-defined]


def test_a_new_token_replaces_the_old_and_basic_auth_keeps_the_username_in_the_config() -> None:
    config_apply(parse_config(config(token="one"), "f.yaml"))
    assert config_apply(parse_config(config(token="one"), "f.yaml")) == []
    assert "~ source kA: telemetry.token replaced" in config_apply(parse_config(config(token="two"), "f.yaml"))
    assert source_connector(Source.objects.get(name="kA")).telemetry.config.token == "two"  # type: ignore[attr-defined]

    changes = config_apply(parse_config(config(username="grafana", password="hunter2-pass"), "f.yaml"))
    assert any("telemetry.password replaced" in c for c in changes)
    source = Source.objects.get(name="kA")
    assert source.config["telemetry"]["username"] == "grafana" and "password" not in source.config["telemetry"]
    settings = source_connector(source).telemetry.config  # type: ignore[attr-defined]
    assert (settings.token, settings.username, settings.password) == ("", "grafana", "hunter2-pass")
    assert "hunter2" not in export()


@pytest.mark.parametrize(("telemetry", "words"), [
    ({"prometheus_url": "prom:9090"}, "'telemetry.prometheus_url' must be an http(s) URL"),
    ({"prometheus_url": "http://p", "token": "t", "username": "u", "password": "p"}, "not both"),
])
def test_a_bad_telemetry_entry_is_refused_naming_the_source(telemetry: dict[str, object], words: str) -> None:
    text = json.dumps({"pools": [{"name": "p"}], "sources": [
        {"name": "kA", "kind": "kubernetes", "pool": "p", "in_cluster": True, "telemetry": telemetry}]})
    with pytest.raises(ConfigError) as err:
        parse_config(text, "f.yaml")
    assert "source 'kA'" in str(err.value) and words in str(err.value)
    assert not Source.objects.exists()
