"""The bound on each team's queue in a pool (allocation.models.queues), and the trigger that keeps
it from ever falling below the queue.

Every lease that becomes pending (inserted pending, or moved back to pending) adds itself and its
GPUs to its queue's bound, under the queue's advisory lock: the lock every create holds while it
decides (allocation.services.queue_caps), so a create never decides from a bound that a lease it
cannot see yet will raise. A queue with no bound row (a pool without caps, or one no create has
counted yet) takes no lock: nothing reads a bound it does not have, and its first capped create
counts."""

from django.db import migrations, models

from core.db import QUEUE_LOCKS, advisory_key_sql

# core.db.advisory_key(QUEUE_LOCKS, pool, team): the lock every create of the queue holds.
_KEY = advisory_key_sql(QUEUE_LOCKS, "NEW.pool_id", "NEW.team_id")

_FORWARD = f"""
ALTER TABLE allocation_queuebound SET (fillfactor = 50);
CREATE FUNCTION allocation_queue_bound_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM allocation_queuebound WHERE pool_id = NEW.pool_id AND team_id = NEW.team_id) THEN
    PERFORM pg_advisory_xact_lock({_KEY});
    UPDATE allocation_queuebound SET leases = leases + 1, gpus = gpus + NEW.gpu_count
     WHERE pool_id = NEW.pool_id AND team_id = NEW.team_id;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER lease_queue_bound_insert AFTER INSERT ON allocation_lease FOR EACH ROW
  WHEN (NEW.state = 'pending') EXECUTE FUNCTION allocation_queue_bound_bump();
CREATE TRIGGER lease_queue_bound_update AFTER UPDATE OF state ON allocation_lease FOR EACH ROW
  WHEN (NEW.state = 'pending' AND OLD.state IS DISTINCT FROM 'pending') EXECUTE FUNCTION allocation_queue_bound_bump();
"""
_BACKWARD = """
DROP TRIGGER lease_queue_bound_update ON allocation_lease;
DROP TRIGGER lease_queue_bound_insert ON allocation_lease;
DROP FUNCTION allocation_queue_bound_bump();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('allocation', '0022_indexes_audit_preempted_by'),
    ]

    operations = [
        migrations.CreateModel(
            name='QueueBound',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('pool_id', models.IntegerField()),
                ('team_id', models.IntegerField()),
                ('leases', models.IntegerField()),
                ('gpus', models.BigIntegerField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('pool_id', 'team_id'), name='queue_bound_one_per_queue')],
            },
        ),
        migrations.RunSQL(_FORWARD, reverse_sql=_BACKWARD),
    ]
