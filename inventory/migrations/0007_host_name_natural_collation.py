"""Host names sort naturally (node-2 before node-10) wherever they are ordered: the column takes an
ICU collation with numeric ordering ("und-u-kn-true"). It is deterministic, so the unique constraint
and `icontains` (LIKE) work as before; ORDER BY name, in the dashboard, the API and every selector,
needs no sort key."""

from django.contrib.postgres.operations import CreateCollation
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0006_host_probe_backoff'),
    ]

    operations = [
        CreateCollation('natural', provider='icu', locale='und-u-kn-true'),
        migrations.AlterField(
            model_name='host',
            name='name',
            field=models.CharField(db_collation='natural', max_length=255),
        ),
    ]
