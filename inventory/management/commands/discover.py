from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from inventory.discovery import source_discover
from inventory.models import Gpu, Host, Source


class Command(BaseCommand):
    help = "Run inventory discovery now; print hosts and GPUs found per source."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--source", help="only this source")

    def handle(self, *args: Any, **opts: Any) -> None:
        sources = Source.objects.select_related("pool")
        if opts["source"]:
            sources = sources.filter(name=opts["source"])
            if not sources.exists():
                raise CommandError(f"no source named {opts['source']!r}")
        fmt = "{:<16} {:<11} {:<28} {:<9} {:>4}  {}"
        self.stdout.write(fmt.format("SOURCE", "KIND", "HOST", "STATE", "GPUS", "MODEL / ERROR"))
        for source in sources:
            report = source_discover(source=source)
            if report.errors and not report.hosts_seen and not report.hosts_failed:
                self.stdout.write(fmt.format(source.name, source.kind, "-", "error", 0, report.errors[0]))
                continue
            for host in Host.objects.filter(source=source).order_by("name"):
                gpus = Gpu.objects.filter(host=host, gone=False)
                models = sorted(set(gpus.values_list("model", flat=True)))
                detail = host.error or ", ".join(models) or "-"
                self.stdout.write(fmt.format(source.name, source.kind, host.name[:28], host.state,
                                             gpus.count(), detail))
            self.stdout.write(f"  {source.name}: {report.hosts_seen} host(s) answered, "
                              f"{report.hosts_failed} failed, {report.gpus_seen} GPU(s) seen, "
                              f"{report.created} new, {report.updated} changed, {report.gone} gone")
