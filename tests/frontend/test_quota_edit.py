"""Admins edit quotas and weights inline: validated, audited, and refused with a clear reason."""

from __future__ import annotations

from typing import Any

import pytest

from allocation.models import AuditEvent, Quota, Team
from allocation.services.admin import quota_set
from core.errors import DomainError

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def test_a_limit_below_the_guarantee_is_refused_with_the_reason(seeded: Any, client_for: Any) -> None:
    quota = Quota.objects.get(team__name="nlp", pool__name="training")
    response = client_for(seeded.users["root"]).post(f"/quotas/{quota.pk}/", {"guaranteed": 8, "limit": 4}, **HX)
    assert response.status_code == 422
    body = response.content.decode()
    assert "Limit 4 is below guaranteed 8" in body and 'role="alert"' in body and 'aria-invalid="true"' in body
    quota.refresh_from_db()
    assert (quota.guaranteed, quota.limit) == (8, 16)
    assert not AuditEvent.objects.filter(action="quota.update").exists()


def test_a_valid_edit_is_saved_audited_and_the_row_redrawn(seeded: Any, client_for: Any) -> None:
    quota = Quota.objects.get(team__name="nlp", pool__name="training")
    response = client_for(seeded.users["root"]).post(f"/quotas/{quota.pk}/", {"guaranteed": 10, "limit": ""}, **HX)
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith(f'<div class="quota-row" id="quota-{quota.pk}"') and "Saved" in body
    assert 'data-q="limit">none<' in body
    quota.refresh_from_db()
    assert (quota.guaranteed, quota.limit) == (10, None)
    event = AuditEvent.objects.get(action="quota.update")
    assert event.actor == "root" and event.data == {"before": {"guaranteed": 8, "limit": 16},
                                                    "after": {"guaranteed": 10, "limit": None}}
    assert "guaranteed 8 → 10, limit 16 → none" in event.message


def test_a_lending_limit_above_the_guarantee_is_refused_and_a_valid_one_shown(
        seeded: Any, client_for: Any) -> None:
    quota = Quota.objects.get(team__name="nlp", pool__name="training")
    client = client_for(seeded.users["root"])
    refused = client.post(f"/quotas/{quota.pk}/", {"guaranteed": 8, "limit": 16, "lending_limit": 9}, **HX)
    assert refused.status_code == 422
    body = refused.content.decode()
    assert "Lends: Lending limit 9 is above guaranteed 8" in body and 'role="alert"' in body
    assert 'name="lending_limit" id="lend-' in body and 'value="9"' in body  # kept to correct
    quota.refresh_from_db()
    assert quota.lending_limit is None
    assert not AuditEvent.objects.filter(action="quota.update").exists()

    saved = client.post(f"/quotas/{quota.pk}/", {"guaranteed": 8, "limit": 16, "lending_limit": 2}, **HX)
    assert saved.status_code == 200 and "Saved" in saved.content.decode()
    assert 'data-q="lending_limit">2<' in saved.content.decode()
    quota.refresh_from_db()
    assert quota.lending_limit == 2
    assert "lending_limit all → 2" in AuditEvent.objects.get(action="quota.update").message
    # Lowering the guarantee below it is refused the same way.
    lowered = client.post(f"/quotas/{quota.pk}/", {"guaranteed": 1, "limit": 16, "lending_limit": 2}, **HX)
    assert lowered.status_code == 422 and "Lending limit 2 is above guaranteed 1" in lowered.content.decode()
    assert Quota.objects.get(pk=quota.pk).guaranteed == 8


def test_a_plain_form_post_redirects_with_a_message(seeded: Any, client_for: Any) -> None:
    quota = Quota.objects.get(team__name="vision", pool__name="inference")
    client = client_for(seeded.users["root"])
    response = client.post(f"/quotas/{quota.pk}/", {"guaranteed": 3, "limit": 8}, follow=True)
    assert "Quota of vision in inference saved." in response.content.decode()
    response = client.post(f"/quotas/{quota.pk}/", {"guaranteed": "x", "limit": 8})
    assert response.status_code == 422 and "not saved" in response.content.decode()


def test_weights_are_validated_and_audited(seeded: Any, client_for: Any) -> None:
    client = client_for(seeded.users["root"])
    bad = client.post("/quotas/teams/nlp/weight/", {"weight": 0}, **HX)
    assert bad.status_code == 422 and Team.objects.get(name="nlp").weight == 1
    good = client.post("/quotas/teams/nlp/weight/", {"weight": 3.5}, **HX)
    assert good.status_code == 200 and good.content.decode().lstrip().startswith('<div id="quota-teams">')
    assert Team.objects.get(name="nlp").weight == 3.5
    assert AuditEvent.objects.get(action="team.update").data == {"before": {"weight": 1.0}, "after": {"weight": 3.5}}
    assert client.post("/quotas/teams/nobody/weight/", {"weight": 2}).status_code == 404


def test_the_service_refuses_what_the_database_would_refuse(seeded: Any) -> None:
    quota = Quota.objects.get(team__name="nlp", pool__name="training")
    with pytest.raises(DomainError, match="below guaranteed"):
        quota_set(quota=quota, guaranteed=5, limit=2, lending_limit=None, actor="root")
    with pytest.raises(DomainError, match="lending_limit 6 is above guaranteed 5") as err:
        quota_set(quota=quota, guaranteed=5, limit=16, lending_limit=6, actor="root")
    assert err.value.code == "invalid_quota" and list(err.value.details) == ["lending_limit"]
    quota_set(quota=quota, guaranteed=8, limit=16, lending_limit=None, actor="root")  # unchanged: nothing written
    assert not AuditEvent.objects.filter(action="quota.update").exists()
