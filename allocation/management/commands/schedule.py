from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from allocation.engine import run_pass
from allocation.models import Lease


class Command(BaseCommand):
    help = "Run one scheduling pass now, synchronously; print grants, preemptions, pending."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--policy", default=None, help="policy name (default: settings)")

    def handle(self, *args: Any, **opts: Any) -> None:
        for report in run_pass(policy=opts["policy"]):
            self.stdout.write(f"pool {report.pool}: granted {len(report.granted)}, preempted "
                              f"{len(report.preempted)}, pending {report.pending} "
                              f"({report.seconds * 1000:.0f} ms)")
            for lease in Lease.objects.filter(pk__in=report.granted).select_related("team", "host"):
                self.stdout.write(f"  granted   {lease.pk} team={lease.team.name} "
                                  f"gpus={lease.gpu_count} host={lease.host}")
            for lease in Lease.objects.filter(pk__in=report.preempted).select_related("team"):
                self.stdout.write(f"  preempted {lease.pk} team={lease.team.name}: {lease.reason}")
            for lease in Lease.objects.filter(pool__name=report.pool, state="pending").select_related(
                    "team").order_by("queue_position")[:50]:
                self.stdout.write(f"  pending   {lease.pk} team={lease.team.name} "
                                  f"#{lease.queue_position}: {lease.reason}")
