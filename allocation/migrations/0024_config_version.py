"""The number a pass tells reconfiguration by (allocation.engine.pass_context).

Every statement that writes a team, a priority class, the scheduler settings, a quota or a
reservation stamps the one row of `allocation_configversion` with a new number, in its own
transaction: readers see the number only once what it stamps is committed. The numbers come from
a sequence, so none is given twice, not after a rollback (which brings the row back to an older
number: the data is back as it was at that number) nor after a TRUNCATE (the flush of tests),
which stamps too."""

from django.db import migrations

_TABLES = ("allocation_team", "allocation_priorityclass", "allocation_schedulersettings",
           "allocation_quota", "allocation_reservation")

_FORWARD = """
CREATE SEQUENCE allocation_config_version_seq;
CREATE TABLE allocation_configversion (id smallint PRIMARY KEY CHECK (id = 1), version bigint NOT NULL);
INSERT INTO allocation_configversion VALUES (1, nextval('allocation_config_version_seq'));
CREATE FUNCTION allocation_config_version_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO allocation_configversion VALUES (1, nextval('allocation_config_version_seq'))
  ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version;
  RETURN NULL;
END $$;
""" + "".join(
    f"CREATE TRIGGER {table}_config_version AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table} "
    "FOR EACH STATEMENT EXECUTE FUNCTION allocation_config_version_bump();\n" for table in _TABLES)

_BACKWARD = "".join(f"DROP TRIGGER {table}_config_version ON {table};\n" for table in _TABLES) + """
DROP FUNCTION allocation_config_version_bump();
DROP TABLE allocation_configversion;
DROP SEQUENCE allocation_config_version_seq;
"""


class Migration(migrations.Migration):

    dependencies = [
        ('allocation', '0023_queue_bounds'),
    ]

    operations = [migrations.RunSQL(_FORWARD, _BACKWARD)]
