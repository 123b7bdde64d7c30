from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from allocation.config import ConfigError, load_config_file
from allocation.config.apply import config_apply


class Command(BaseCommand):
    help = "Apply declarative YAML configuration (idempotent; prints what changed)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-f", "--filename", action="append", required=True,
                            help="configuration file; repeat to apply several in order")
        parser.add_argument("--prune", action="store_true",
                            help="also delete quotas, sources and priority classes not in the files")
        parser.add_argument("--dry-run", action="store_true", help="show the changes, apply none")

    def handle(self, *args: Any, **opts: Any) -> None:
        total = 0
        for path in opts["filename"]:
            try:
                cfg = load_config_file(path)
                changes = config_apply(cfg, prune=opts["prune"], dry_run=opts["dry_run"])
            except ConfigError as exc:
                raise CommandError(f"{path}: refused, nothing applied:\n  " + "\n  ".join(exc.errors)) from None
            for line in changes:
                self.stdout.write(line)
            total += len(changes)
            verb = "would change" if opts["dry_run"] else "applied"
            self.stdout.write(f"{path}: {verb} {len(changes)} change(s)" if changes
                              else f"{path}: no change")
