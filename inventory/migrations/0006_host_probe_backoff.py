"""Discovery's per-host backoff: a host's probes failed in a row and when it is probed next (null:
every round). Existing hosts start with none failed, due at once."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0005_source_telemetry'),
    ]

    operations = [
        migrations.AddField(
            model_name='host',
            name='next_probe_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='host',
            name='probe_failures',
            field=models.PositiveIntegerField(default=0),
        ),
    ]
