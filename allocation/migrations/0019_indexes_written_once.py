"""No index that repeats another's lead, on the tables every lease writes.

A lease row is inserted, then changes state at least twice (granted, released); `state` is
indexed, so each change is a new version with an entry in every index of the table (14). Three
of them repeated what another already leads with: `pool_id` ((pool, state)), `team_id`
((team, state)), and `state`'s LIKE twin (never used: states are matched whole). The same on the
tables a grant and a release write: a lease's GPU links (`lease_id`, led by the unique
(lease, gpu)) and its usage rows (`team_id`, led by (team, started_at)). Fewer entries to write
and to keep in memory at every step of every lease; every look-up they served is served by the
index that leads with the same column."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('allocation', '0018_lease_fillfactor'),
        ('inventory', '0009_gpu_rows_updated_in_place'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='lease',
            name='pool',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='leases', to='inventory.pool'),
        ),
        migrations.AlterField(
            model_name='lease',
            name='state',
            field=models.CharField(choices=[('pending', 'Pending'), ('granted', 'Granted'), ('bound', 'Bound'), ('released', 'Released'), ('expired', 'Expired'), ('preempted', 'Preempted'), ('failed', 'Failed'), ('lost', 'Lost')], default='pending', max_length=16),
        ),
        migrations.AlterField(
            model_name='lease',
            name='team',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='leases', to='allocation.team'),
        ),
        migrations.AlterField(
            model_name='leasegpu',
            name='lease',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='gpu_links', to='allocation.lease'),
        ),
        migrations.AlterField(
            model_name='leaseusage',
            name='team',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='usage', to='allocation.team'),
        ),
        migrations.AddIndex(
            model_name='lease',
            index=models.Index(fields=['state'], name='lease_state'),
        ),
    ]
