"""`sources[].device_binding` (kubernetes): applied, exported and applied again unchanged; a bad
value refused with its position, nothing applied."""

from __future__ import annotations

import pytest
import yaml

from allocation.config import ConfigError, parse_config
from allocation.config.apply import config_apply, config_export
from inventory.models import Source

SOURCE = ("pools: [{name: k8s}]\nsources:\n  - {name: prod, kind: kubernetes, pool: k8s, "
          "kubeconfig: /etc/gpupool/kubeconfig, device_binding: %s}\n")  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["auto", "dra", "device_plugin"])
def test_device_binding_round_trips_through_export(value: str) -> None:
    assert config_apply(parse_config(SOURCE % value, "a.yaml"))
    assert Source.objects.get(name="prod").config["device_binding"] == value

    exported = config_export()
    (source,) = exported["sources"]
    assert source["device_binding"] == value
    assert config_apply(parse_config(yaml.safe_dump(exported), "export.yaml")) == []


@pytest.mark.django_db
def test_changing_it_is_reported_as_a_change() -> None:
    config_apply(parse_config(SOURCE % "auto", "a.yaml"))
    changes = config_apply(parse_config(SOURCE % "dra", "b.yaml"))
    assert any("prod" in change for change in changes)
    assert Source.objects.get(name="prod").config["device_binding"] == "dra"


@pytest.mark.parametrize("value", ["DRA", "exact", "true"])
def test_a_bad_value_is_a_config_error_naming_the_choices(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(SOURCE % value, "bad.yaml")
    assert "bad.yaml:3" in str(err.value)
    assert "'device_binding' must be one of auto, dra, device_plugin" in str(err.value)
