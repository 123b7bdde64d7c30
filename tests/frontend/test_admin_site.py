"""The Django admin: every model registered and usable by pool admins, secrets never shown,
system-written rows read-only, and admin edits audited."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps
from django.contrib import admin
from django.urls import reverse

from allocation.models import AuditEvent, Quota
from inventory.models import Host, Source

pytestmark = pytest.mark.django_db

MODELS = ["inventory.Pool", "inventory.Source", "inventory.Host", "inventory.Gpu", "inventory.GpuSample",
          "allocation.Team", "allocation.Quota", "allocation.PriorityClass", "allocation.Lease",
          "allocation.LeaseGpu", "allocation.AuditEvent", "allocation.UsageLedger", "allocation.SchedulerSettings",
          "allocation.Notification", "allocation.NotificationDelivery",
          "core.ApiToken", "core.OidcIdentity", "history.PoolPoint", "history.TeamPoolPoint", "history.ModelPoint",
          "history.GpuPoint"]


def url(model: Any, view: str, *args: Any) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def test_every_model_is_registered_and_its_list_and_search_work(seeded: Any, client_for: Any) -> None:
    client = client_for(seeded.users["root"])  # is_staff, no per-model permissions: a pool admin
    for label in MODELS:
        model = apps.get_model(label)
        assert admin.site.is_registered(model), label
        response = client.get(url(model, "changelist"), {"q": "a"} if admin.site._registry[model].search_fields
                              else {})
        assert response.status_code == 200, label
        first = model.objects.first()
        if first is not None:
            assert client.get(url(model, "change", first.pk)).status_code == 200, label


def test_the_source_secret_is_never_shown(seeded: Any, client_for: Any) -> None:
    source = Source.objects.get(name="lab")
    client = client_for(seeded.users["root"])
    for page in (client.get(url(Source, "change", source.pk)), client.get(url(Source, "changelist"))):
        assert source.secret not in page.content.decode() and 'name="secret"' not in page.content.decode()


def test_audit_events_are_read_only(seeded: Any, client_for: Any) -> None:
    client = client_for(seeded.users["root"])
    event = AuditEvent.objects.first()
    assert event is not None  # the seeded leases were audited
    assert client.get(url(AuditEvent, "add")).status_code == 403
    assert client.post(url(AuditEvent, "change", event.pk), {"actor": "forged"}).status_code == 403
    assert client.post(url(AuditEvent, "delete", event.pk), {"post": "yes"}).status_code == 403
    assert AuditEvent.objects.get(pk=event.pk).actor != "forged"


def test_members_are_kept_out_of_the_admin(seeded: Any, client_for: Any) -> None:
    response = client_for(seeded.users["alice"]).get("/admin/allocation/quota/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_admin_edits_and_host_actions_are_audited(seeded: Any, client_for: Any) -> None:
    client = client_for(seeded.users["root"])
    quota = Quota.objects.get(team__name="vision", pool__name="inference")
    response = client.post(url(Quota, "change", quota.pk), {"team": quota.team_id, "pool": quota.pool_id,
                                                            "guaranteed": 3, "limit": 8})
    assert response.status_code == 302
    event = AuditEvent.objects.get(action="quota.update", actor="root")
    assert event.data["after"] == {"guaranteed": 3} and event.data["via"] == "admin"
    refused = client.post(url(Quota, "change", quota.pk), {"team": quota.team_id, "pool": quota.pool_id,
                                                           "guaranteed": 9, "limit": 8})
    assert refused.status_code == 200  # the form shows the database's check as an error
    host = Host.objects.get(name="demo-node-3")
    client.post(url(Host, "changelist"), {"action": "host_cordon", "_selected_action": [host.pk]})
    assert Host.objects.get(pk=host.pk).state == "cordoned"
    assert AuditEvent.objects.filter(action="host.cordon", actor="root").exists()
