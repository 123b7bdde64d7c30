"""Notifications read the outbox after a cursor, in the order transactions ended, instead of
marking each row (`notified_at`): the relay is left the only writer of an outbox row.

Existing rows are stamped with a transaction id just below every transaction running now, and the
cursor put just before the first row not yet notified; a row a transaction running now writes
later has a greater id than the cursor's, so none is skipped. A row notified already but after the
cursor is derived again: the database refuses the second delivery (`notification_delivery_once`).
"""

from django.db import migrations, models

import core.db.expressions

START = """
WITH horizon AS (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint - 1 AS xact),
stamped AS (UPDATE allocation_leaseoutbox SET xact = (SELECT xact FROM horizon))
INSERT INTO allocation_notificationcursor (id, xact, outbox_id, moved_at)
SELECT 1, (SELECT xact FROM horizon),
       COALESCE((SELECT min(id) - 1 FROM allocation_leaseoutbox WHERE notified_at IS NULL),
                (SELECT max(id) FROM allocation_leaseoutbox), 0),
       now()
"""


class Migration(migrations.Migration):

    dependencies = [
        ('allocation', '0024_config_version'),
    ]

    operations = [
        migrations.CreateModel(
            name='NotificationCursor',
            fields=[
                ('id', models.SmallIntegerField(default=1, primary_key=True, serialize=False)),
                ('xact', models.BigIntegerField(default=0)),
                ('outbox_id', models.BigIntegerField(default=0)),
                ('moved_at', models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.AddField(
            model_name='leaseoutbox',
            name='xact',
            field=models.BigIntegerField(db_default=core.db.expressions.CurrentTransaction(), editable=False),
        ),
        migrations.RunSQL(START, migrations.RunSQL.noop),
        migrations.RemoveIndex(
            model_name='leaseoutbox',
            name='lease_outbox_unnotified',
        ),
        migrations.RemoveField(
            model_name='leaseoutbox',
            name='notified_at',
        ),
        migrations.AddIndex(
            model_name='leaseoutbox',
            index=models.Index(fields=['xact', 'id'], name='lease_outbox_xact'),
        ),
    ]
