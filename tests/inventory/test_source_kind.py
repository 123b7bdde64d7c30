"""Source.kind is any kind the connector registry knows: no choices list, no migration per kind,
and every way in (config file, admin form, API filter) says which kinds there are."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from agents.registry import known_kinds
from allocation.config import ConfigError, parse_config
from inventory.models import Pool, Source

KNOWN = "known kinds: kubernetes, simulated, ssh"


def test_the_kind_column_has_no_choices_and_fits_every_registered_kind() -> None:
    field = Source._meta.get_field("kind")
    assert not field.choices and field.max_length is not None
    assert all(len(kind) <= field.max_length for kind in known_kinds())


@pytest.mark.django_db
def test_the_model_refuses_an_unknown_kind_naming_the_known_ones() -> None:
    pool = Pool.objects.create(name="p")
    Source(name="lab", kind="ssh", pool=pool).full_clean()
    with pytest.raises(ValidationError) as err:
        Source(name="hpc", kind="slurm", pool=pool).full_clean()
    assert err.value.message_dict == {"kind": [f"unknown source kind 'slurm'; {KNOWN}"]}


def test_the_config_file_refuses_an_unknown_kind_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config("pools:\n  - {name: p}\nsources:\n  - {name: hpc, kind: slurm, pool: p}\n", "f.yaml")
    assert f"unknown source kind 'slurm'; {KNOWN}" in str(err.value)


@pytest.mark.django_db
def test_the_admin_form_refuses_an_unknown_kind_naming_the_known_ones(admin_client: Any) -> None:
    pool = Pool.objects.create(name="p")
    form = {"name": "hpc", "kind": "slurm", "pool": pool.pk, "config": "{}", "interval_s": 60}
    refused = admin_client.post(reverse("admin:inventory_source_add"), form)
    assert refused.status_code == 200  # the form again, with the error
    assert f"unknown source kind &#x27;slurm&#x27;; {KNOWN}" in refused.content.decode()
    assert not Source.objects.exists()
    added = admin_client.post(reverse("admin:inventory_source_add"), {**form, "kind": "simulated"})
    assert added.status_code == 302 and Source.objects.get().kind == "simulated"


@pytest.mark.django_db
def test_the_hosts_api_filter_refuses_an_unknown_kind_with_a_400_naming_the_field(
    demo_fleet: Any, make_user: Any, api: Any
) -> None:
    client = api(make_user("alice", teams=("vision",)))
    assert client.get("/api/v1/hosts/", {"kind": "simulated"}).json()["count"] > 0
    refused = client.get("/api/v1/hosts/", {"kind": "slurm"})
    assert refused.status_code == 400
    assert refused.json()["details"] == {"kind": [f"unknown source kind 'slurm'; {KNOWN}"]}
