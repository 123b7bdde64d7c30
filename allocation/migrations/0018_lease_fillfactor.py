"""Room on each page of the lease table for a new version of its rows (fillfactor 70).

A scheduling pass rewrites pending leases' explanations (code, reason, queue position, estimated
start: none of them indexed) in one UPDATE of up to the whole queue. With full pages each new row
version went to another page and every one of the table's 14 indexes got a new entry for it; with
room on the page the update is HOT (heap-only: no index entry), and the old version is pruned by the
next visit to the page. Existing pages keep their packing until rewritten; new ones get the room."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("allocation", "0017_topology")]

    operations = [
        migrations.RunSQL("ALTER TABLE allocation_lease SET (fillfactor = 70)",
                          reverse_sql="ALTER TABLE allocation_lease RESET (fillfactor)"),
    ]
