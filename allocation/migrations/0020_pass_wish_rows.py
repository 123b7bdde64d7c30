"""A row a wish for a pass, instead of one row per pool (allocation.models.wanted.PassWanted).

The table holds wishes for passes not yet run, for seconds at most; it is made anew, and a wish
recorded at the moment of the upgrade is caught up by the next periodic pass."""

from __future__ import annotations

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("allocation", "0019_indexes_written_once"), ("inventory", "0009_gpu_rows_updated_in_place")]

    operations = [
        migrations.DeleteModel(name="PassWanted"),
        migrations.CreateModel(
            name="PassWanted",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("wanted_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("pool", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+",
                                           to="inventory.pool")),
            ],
        ),
    ]
