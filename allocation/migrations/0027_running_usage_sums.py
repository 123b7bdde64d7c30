"""Running usage from sums the database keeps (allocation.running_usage): the grant ledger, the ended
leases' side on the usage ledger, a trigger on the lease table that keeps both, and the function
that rebuilds them from the lease rows (run once here)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

# A running lease: what allocation.ledger.RUNNING_SQL sums one by one (holding, granted, not ended).
_RUNNING = "{row}.state IN ('granted', 'bound') AND {row}.granted_at IS NOT NULL AND {row}.ended_at IS NULL"
# The half-life in seconds, as allocation.ledger.ledger_close_sql reads it (168 h: the model's default).
_H = "(SELECT COALESCE(MAX(fair_share_half_life_hours), 168.0) * 3600.0 FROM allocation_schedulersettings WHERE id = 1)"


def _half_power(elapsed: str, floor: int) -> str:
    """2^(−elapsed/h), the exponent kept in [floor, 0] (PostgreSQL raises on underflow)."""
    return f"power(2, LEAST(0, GREATEST({floor}, -({elapsed}) / h)))"


def _decayed(value: str, since: str, t: str) -> str:
    """`value` decayed from `since` to `t`: flushed below 1e-100, its factor floored at 2^−600, as the
    ledger's closed usage is (ledger_close_sql), so that the product never underflows."""
    return (f"CASE WHEN abs({value}) < 1e-100 THEN 0 ELSE {value} * "
            f"{_half_power(f'EXTRACT(EPOCH FROM {t} - {since})::float8', -600)} END")


def _added(table: str, row: str, key: str, gpus: str, weight: str) -> str:
    """Add a lease's GPUs and grant weight to `table`'s row `key` (its alias `l`), decayed to
    t = max(the row's as_of, the lease's grant)."""
    t = f"GREATEST(l.as_of, {row}.granted_at)"
    weight_now = _half_power(f"EXTRACT(EPOCH FROM {t} - {row}.granted_at)::float8", -1000)
    closed = f"closed_usage = {_decayed('l.closed_usage', 'l.as_of', t)}, " if table == "allocation_usageledger" else ""
    cols, values = key.split("=")
    return (f"INSERT INTO {table} AS l ({cols}, {gpus}, {weight}, as_of{', closed_usage' if closed else ''}) "
            f"VALUES ({values}, {row}.gpu_count, {row}.gpu_count, {row}.granted_at{', 0' if closed else ''}) "
            f"ON CONFLICT ({cols}) DO UPDATE SET {closed}"
            f"{weight} = {_decayed(f'l.{weight}', 'l.as_of', t)} + {row}.gpu_count * {weight_now}, "
            f"{gpus} = l.{gpus} + {row}.gpu_count, as_of = {t};")


# Ended: on the lease's ledger stripe (allocation.ledger.ledger_stripe: the uuid's integer mod 8,
# its last byte mod 8), the row the end's own ledger write holds already.
_FORWARD = f"""
CREATE FUNCTION allocation_lease_running_sums() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  h float8;
BEGIN
  h := {_H};
  IF TG_OP <> 'INSERT' AND {_RUNNING.format(row='OLD')} THEN
    {_added('allocation_usageledger', 'OLD', 'team_id, stripe=OLD.team_id, get_byte(uuid_send(OLD.id), 15) % 8',
            'ended_gpus', 'ended_weight')}
  END IF;
  IF TG_OP <> 'DELETE' AND {_RUNNING.format(row='NEW')} THEN
    {_added('allocation_grantledger', 'NEW', 'team_id, pool_id=NEW.team_id, NEW.pool_id', 'gpus', 'weight')}
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER lease_running_sums_insert AFTER INSERT ON allocation_lease FOR EACH ROW
  WHEN ({_RUNNING.format(row='NEW')}) EXECUTE FUNCTION allocation_lease_running_sums();
CREATE TRIGGER lease_running_sums_update AFTER UPDATE ON allocation_lease FOR EACH ROW
  WHEN (({_RUNNING.format(row='OLD')}, OLD.team_id, OLD.gpu_count, OLD.granted_at)
        IS DISTINCT FROM ({_RUNNING.format(row='NEW')}, NEW.team_id, NEW.gpu_count, NEW.granted_at))
  EXECUTE FUNCTION allocation_lease_running_sums();
CREATE TRIGGER lease_running_sums_delete AFTER DELETE ON allocation_lease FOR EACH ROW
  WHEN ({_RUNNING.format(row='OLD')}) EXECUTE FUNCTION allocation_lease_running_sums();

-- The sums from the lease rows, with the half-life now set (allocation.running_usage.rebuild):
-- writers of the sums wait until it commits, and it reads what they committed before.
CREATE FUNCTION allocation_rebuild_running_sums() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  h float8;
  t timestamptz;
BEGIN
  LOCK TABLE allocation_usageledger, allocation_grantledger IN SHARE ROW EXCLUSIVE MODE;
  h := {_H};
  t := clock_timestamp();
  DELETE FROM allocation_grantledger;
  UPDATE allocation_usageledger SET ended_gpus = 0, ended_weight = 0 WHERE ended_gpus <> 0 OR ended_weight <> 0;
  INSERT INTO allocation_grantledger (team_id, pool_id, gpus, weight, as_of)
  SELECT x.team_id, x.pool_id, sum(x.gpu_count),
         sum(x.gpu_count * {_half_power("EXTRACT(EPOCH FROM t - x.granted_at)::float8", -1000)}), t
  FROM allocation_lease x WHERE {_RUNNING.format(row='x')} GROUP BY x.team_id, x.pool_id;
  UPDATE allocation_schedulersettings SET weights_half_life_hours = fair_share_half_life_hours
  WHERE id = 1 AND weights_half_life_hours IS DISTINCT FROM fair_share_half_life_hours;
END $$;

SELECT allocation_rebuild_running_sums();
"""

_BACKWARD = """
DROP TRIGGER lease_running_sums_insert ON allocation_lease;
DROP TRIGGER lease_running_sums_update ON allocation_lease;
DROP TRIGGER lease_running_sums_delete ON allocation_lease;
DROP FUNCTION allocation_lease_running_sums();
DROP FUNCTION allocation_rebuild_running_sums();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('allocation', '0026_lease_ending'),
    ]

    operations = [
        migrations.AddField(
            model_name='schedulersettings',
            name='weights_half_life_hours',
            field=models.FloatField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name='usageledger',
            name='ended_gpus',
            field=models.BigIntegerField(db_default=0, default=0, editable=False),
        ),
        migrations.AddField(
            model_name='usageledger',
            name='ended_weight',
            field=models.FloatField(db_default=0.0, default=0.0, editable=False),
        ),
        migrations.CreateModel(
            name='GrantLedger',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('pool_id', models.IntegerField()),
                ('gpus', models.BigIntegerField(default=0)),
                ('weight', models.FloatField(default=0.0)),
                ('as_of', models.DateTimeField(default=django.utils.timezone.now)),
                ('team', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                           related_name='+', to='allocation.team')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('team', 'pool_id'), name='grant_ledger_team_pool')],
            },
        ),
        migrations.RunSQL(_FORWARD, _BACKWARD),
    ]
