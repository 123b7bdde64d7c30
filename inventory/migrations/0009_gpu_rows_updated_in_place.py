"""GPU rows updated in place: no index on `state`, and room on each page (fillfactor 50).

Every grant and every release rewrites its GPUs' `state` and `leased`. With `state` in three
indexes (its own, its LIKE twin and (pool, state)) each such update was a new row version with a
new entry in all eleven of the table's indexes: 12 WAL records a GPU, and dead index entries that
every look-up by id walked until the next vacuum (111,000 dead versions over 600 rows after the
Kueue baseline on a server without autovacuum). Unindexed, the update is HOT (heap-only) when
its page has room for the new version: one WAL record, no index entry, and the old version pruned
by the next visit to the page. Lists of GPUs filter by pool or host first (both indexed); the
state filter runs on those rows."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("inventory", "0008_host_name_natural_collation")]

    operations = [
        migrations.RemoveIndex(model_name="gpu", name="inventory_g_pool_id_d39f05_idx"),
        migrations.AlterField(
            model_name="gpu",
            name="state",
            field=models.CharField(choices=[("free", "Free"), ("leased", "Leased"), ("cordoned", "Cordoned"),
                                            ("offline", "Offline"), ("unhealthy", "Unhealthy"),
                                            ("foreign", "Foreign")], default="free", max_length=16),
        ),
        migrations.RunSQL("ALTER TABLE inventory_gpu SET (fillfactor = 50)",
                          reverse_sql="ALTER TABLE inventory_gpu RESET (fillfactor)"),
    ]
