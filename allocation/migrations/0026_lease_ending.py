"""The leases being ended while they keep their GPUs, by pool: a pass reads their links without the
pool's history (allocation.running_links)."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('allocation', '0025_notify_cursor'),
        ('inventory', '0009_gpu_rows_updated_in_place'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name='lease',
            index=models.Index(condition=models.Q(('ending_since__isnull', False)), fields=['pool'], name='lease_ending'),
        ),
    ]
