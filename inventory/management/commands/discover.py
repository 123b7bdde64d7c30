from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.db import db_now
from inventory.discovery import source_discover
from inventory.models import Gpu, Host, Source
from inventory.selectors import hosts_backing_off


class Command(BaseCommand):
    help = ("Run inventory discovery now; print hosts and GPUs found per source. Every host is probed, "
            "those backing off after failures included, unless --host names the ones to probe at once.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--source", help="only this source")
        parser.add_argument("--host", action="append", default=[], metavar="NAME",
                            help="probe this host now even if it is backing off (repeat for several); "
                                 "the sources' other hosts backing off wait for their turn")

    def handle(self, *args: Any, **opts: Any) -> None:
        sources = Source.objects.select_related("pool")
        if opts["source"]:
            sources = sources.filter(name=opts["source"])
            if not sources.exists():
                raise CommandError(f"no source named {opts['source']!r}")
        fmt = "{:<16} {:<11} {:<28} {:<9} {:>4}  {}"
        self.stdout.write(fmt.format("SOURCE", "KIND", "HOST", "STATE", "GPUS", "MODEL / ERROR"))
        for source in sources:
            # An admin asking is the reason to probe now: the backoff only spares the beat's rounds.
            skip = hosts_backing_off(source=source, now=db_now()) - set(opts["host"]) if opts["host"] else ()
            report = source_discover(source=source, skip=skip)
            if report.errors and not report.hosts_seen and not report.hosts_failed:
                self.stdout.write(fmt.format(source.name, source.kind, "-", "error", 0, report.errors[0]))
                continue
            for host in Host.objects.filter(source=source).order_by("name"):
                gpus = Gpu.objects.filter(host=host, gone=False)
                models = sorted(set(gpus.values_list("model", flat=True)))
                detail = host.error or ", ".join(models) or "-"
                if host.probe_failures:
                    detail += f" (failed {host.probe_failures}× in a row" + (
                        f"; next probe {host.next_probe_at:%H:%M:%S} UTC)" if host.next_probe_at else ")")
                self.stdout.write(fmt.format(source.name, source.kind, host.name[:28], host.state,
                                             gpus.count(), detail))
            self.stdout.write(f"  {source.name}: {report.hosts_seen} host(s) answered, "
                              f"{report.hosts_failed} failed, {report.hosts_skipped} backing off, "
                              f"{report.gpus_seen} GPU(s) seen, "
                              f"{report.created} new, {report.updated} changed, {report.gone} gone")
