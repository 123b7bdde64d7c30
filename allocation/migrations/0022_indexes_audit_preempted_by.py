"""Fewer index entries written by every lease: the audit log's and the lease's own.

A lease writes three audit events (created, granted, released), each an entry in every index of
the audit table (7), and three lease row versions with an entry in every index of the lease table.
Three of those indexes served no query:
- `action`'s plain index: `action` is looked up whole (metrics) and by prefix (the API's
  `action_prefix`); its LIKE twin (varchar_pattern_ops) serves both, so it stays, renamed;
- `object_id`'s LIKE twin: `object_id` is only ever matched whole;
- `preempted_by` on the lease: nothing looks leases up by their preemptor, and leases are never
  deleted (the lookup Django's SET_NULL would make).

The indexes that stay are renamed, not built again (a large audit table is not rewritten).

And the audit event's foreign key to its lease is no constraint in the database any more: a
key-share check of the lease row at the commit of each of its three events, for leases that are
never deleted (Django still sets the column null if one is)."""

import django.db.models.deletion
from django.db import migrations, models

_FORWARD = """
DROP INDEX IF EXISTS allocation_auditevent_action_e107fb95;
ALTER INDEX IF EXISTS allocation_auditevent_action_e107fb95_like RENAME TO audit_action;
CREATE INDEX IF NOT EXISTS audit_action ON allocation_auditevent (action varchar_pattern_ops);
DROP INDEX IF EXISTS allocation_auditevent_object_id_eda28d09_like;
ALTER INDEX IF EXISTS allocation_auditevent_object_id_eda28d09 RENAME TO audit_object_id;
CREATE INDEX IF NOT EXISTS audit_object_id ON allocation_auditevent (object_id);
DROP INDEX IF EXISTS allocation_lease_preempted_by_id_0b4eb906;
"""
_BACKWARD = """
ALTER INDEX audit_action RENAME TO allocation_auditevent_action_e107fb95_like;
CREATE INDEX allocation_auditevent_action_e107fb95 ON allocation_auditevent (action);
ALTER INDEX audit_object_id RENAME TO allocation_auditevent_object_id_eda28d09;
CREATE INDEX allocation_auditevent_object_id_eda28d09_like ON allocation_auditevent (object_id varchar_pattern_ops);
CREATE INDEX allocation_lease_preempted_by_id_0b4eb906 ON allocation_lease (preempted_by_id);
"""


class Migration(migrations.Migration):

    dependencies = [
        ('allocation', '0021_ledger_stripes'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(_FORWARD, reverse_sql=_BACKWARD)],
            state_operations=[
                migrations.AlterField(
                    model_name='auditevent',
                    name='action',
                    field=models.CharField(max_length=64),
                ),
                migrations.AlterField(
                    model_name='auditevent',
                    name='object_id',
                    field=models.CharField(max_length=64),
                ),
                migrations.AlterField(
                    model_name='lease',
                    name='preempted_by',
                    field=models.ForeignKey(blank=True, db_index=False, null=True,
                                            on_delete=django.db.models.deletion.SET_NULL,
                                            related_name='preempted', to='allocation.lease'),
                ),
                migrations.AddIndex(
                    model_name='auditevent',
                    index=models.Index(fields=['action'], name='audit_action', opclasses=['varchar_pattern_ops']),
                ),
                migrations.AddIndex(
                    model_name='auditevent',
                    index=models.Index(fields=['object_id'], name='audit_object_id'),
                ),
            ],
        ),
        migrations.AlterField(
            model_name='auditevent',
            name='lease',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True,
                                    on_delete=django.db.models.deletion.SET_NULL, related_name='audit_events',
                                    to='allocation.lease'),
        ),
    ]
