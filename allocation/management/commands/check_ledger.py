from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from allocation.selectors.invariants import ledger_check


class Command(BaseCommand):
    help = ("Check the allocation ledger's invariants on the live database (who holds which GPU: "
            "lease rows, GPU links and GPU rows agree); exits 1 on any drift.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-o", "--output", choices=("table", "json"), default="table")

    def handle(self, *args: Any, **opts: Any) -> None:
        report = ledger_check()
        if opts["output"] == "json":
            self.stdout.write(json.dumps(report.as_dict(), indent=2))
        elif report.ok:
            self.stdout.write(f"ledger OK: {report.gpus} GPUs, {report.holding_leases} granted or bound "
                              "leases, every check holds")
        else:
            for finding in report.findings:
                shown = ", ".join(finding.examples)
                more = f" and {finding.count - len(finding.examples)} more" if finding.count > len(
                    finding.examples) else ""
                self.stdout.write(f"DRIFT {finding.check}: {finding.count} × {finding.meaning} "
                                  f"({shown}{more})")
        if not report.ok:
            raise SystemExit(1)
