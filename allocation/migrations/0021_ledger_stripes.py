"""The fair-share ledger in stripes: a few rows a team (allocation.ledger.STRIPES), summed.

Every release adds its lease's usage to its team's ledger in the release's own statement, which
kept the team's one row locked until the release committed: the releases of one team queued on
it, one commit (and its WAL flush) after the other. In the Kueue baseline two thirds of the
samples of a running release statement were waits for that lock. A lease's stripe is its id's,
so two releases of a team meet on a row one time in STRIPES. Usage decays linearly, so the sum
of the stripes, each decayed from its own `as_of`, is the team's usage exactly. Existing rows
become stripe 0."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('allocation', '0020_pass_wish_rows'),
    ]

    operations = [
        migrations.AddField(
            model_name='usageledger',
            name='stripe',
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AlterField(
            model_name='usageledger',
            name='team',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='ledgers', to='allocation.team'),
        ),
        migrations.AddConstraint(
            model_name='usageledger',
            constraint=models.UniqueConstraint(fields=('team', 'stripe'), name='usage_ledger_team_stripe'),
        ),
    ]
