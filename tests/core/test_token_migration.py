"""Keys issued before tokens were hashed (DRF's plain-text `authtoken_token`) keep working after
the upgrade, and the plain-text table is gone."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.apps import apps
from django.db import connection

from core.models import ApiToken
from core.tokens import token_lookup

pytestmark = pytest.mark.django_db

OLD_KEY = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"  # the shape DRF issued: 40 hex characters


def _old_table_with(user: Any) -> None:
    with connection.cursor() as cur:
        cur.execute("CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamp with time zone "
                    "NOT NULL, user_id integer NOT NULL UNIQUE)")
        cur.execute("INSERT INTO authtoken_token (key, created, user_id) VALUES (%s, '2025-01-02T03:04:05Z', %s)",
                    [OLD_KEY, user.pk])


def test_old_keys_become_digests_and_the_plain_text_table_is_dropped(make_user: Any, api: Any) -> None:
    alice = make_user("alice")
    _old_table_with(alice)
    migration = importlib.import_module("core.migrations.0002_move_authtoken_keys")
    with connection.schema_editor() as editor:
        migration.move_keys(apps, editor)
    assert "authtoken_token" not in connection.introspection.table_names()
    row = ApiToken.objects.get(user=alice)
    assert row.prefix == OLD_KEY[:8] and row.scope == "write" and row.created_at.year == 2025
    assert OLD_KEY not in str(ApiToken.objects.filter(pk=row.pk).values().get())
    assert token_lookup(OLD_KEY).user == alice
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {OLD_KEY}")
    assert client.get("/api/v1/pools/").status_code == 200


def test_a_database_without_the_old_table_has_nothing_to_move(db: Any) -> None:
    migration = importlib.import_module("core.migrations.0002_move_authtoken_keys")
    with connection.schema_editor() as editor:
        migration.move_keys(apps, editor)
    assert not ApiToken.objects.exists()
