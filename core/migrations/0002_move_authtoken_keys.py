"""Keys issued by DRF's `rest_framework.authtoken` (one plain-text key per user) become ApiToken
rows holding the key's digest, so every issued key keeps working; then the plain-text table is
dropped, so no key stays readable in the database. A database that never had the table (a fresh
install) has nothing to move. Not reversible: the keys are no longer known."""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import migrations

OLD_TABLE = "authtoken_token"


def move_keys(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if OLD_TABLE not in connection.introspection.table_names():
        return
    api_token = apps.get_model("core", "ApiToken")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, user_id, created FROM {OLD_TABLE}")  # noqa: S608  (a constant)
        rows = cursor.fetchall()
    for key, user_id, created in rows:
        digest = hashlib.sha256(key.encode()).hexdigest()
        api_token.objects.get_or_create(digest=digest, defaults={
            "user_id": user_id, "name": "migrated from the old token table", "prefix": key[:8],
            "scope": "write", "created_at": created})
    schema_editor.execute(f"DROP TABLE {OLD_TABLE}")


class Migration(migrations.Migration):
    dependencies = [("core", "0001_initial")]

    operations = [migrations.RunPython(move_keys, migrations.RunPython.noop, elidable=False)]
