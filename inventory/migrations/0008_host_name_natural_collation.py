"""Host names sort naturally (node-2 before node-10) wherever they are ordered: the column takes an
ICU collation with numeric ordering ("und-u-kn-true"). It is deterministic, so the unique constraint
and `icontains` (LIKE) work as before; ORDER BY name, in the dashboard, the API and every selector,
needs no sort key.

A PostgreSQL built without ICU (the embedded one of `core/embedded.py` is) gets a collation of that
name copied from "C": names then sort as text (node-10 before node-2), and nothing else changes."""

from django.db import DatabaseError, migrations, models, transaction

ICU = "CREATE COLLATION IF NOT EXISTS \"natural\" (provider = icu, locale = 'und-u-kn-true')"
PLAIN = "CREATE COLLATION IF NOT EXISTS \"natural\" FROM \"C\""


def create_collation(apps, schema_editor):
    connection = schema_editor.connection
    try:
        # Tried, not looked up: the embedded build lists ICU collations in pg_collation yet refuses
        # to create one ("ICU is not supported in this build").
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(ICU)
    except DatabaseError:
        with connection.cursor() as cursor:
            cursor.execute(PLAIN)


def drop_collation(apps, schema_editor):
    schema_editor.execute('DROP COLLATION IF EXISTS "natural"')


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0007_gpu_nvlink_island'),
    ]

    operations = [
        migrations.RunPython(create_collation, drop_collation),
        migrations.AlterField(
            model_name='host',
            name='name',
            field=models.CharField(db_collation='natural', max_length=255),
        ),
    ]
