"""A source's telemetry state: why its separate telemetry (a Kubernetes source's Prometheus) could
not be read at the last discovery, and when it last was."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0004_gpu_uuid_per_source'),
    ]

    operations = [
        migrations.AddField(
            model_name='source',
            name='telemetry_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='source',
            name='telemetry_error',
            field=models.TextField(blank=True, default=''),
        ),
    ]
