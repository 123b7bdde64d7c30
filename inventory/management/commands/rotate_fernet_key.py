from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from inventory.secrets import secrets_rotate


class Command(BaseCommand):
    help = ("Re-encrypt every stored secret (SSH private keys, webhook signing keys) with the first key of "
            "GPUPOOL_FERNET_KEY, in one transaction; prints how many rows changed. Rotation: set "
            "GPUPOOL_FERNET_KEY=NEW,OLD, run this, then set GPUPOOL_FERNET_KEY=NEW. Safe to run again (0 rows the "
            "second time).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--from-secret-key", action="store_true",
                            help="also open secrets with the key derived from SECRET_KEY (what an install "
                                 "without GPUPOOL_FERNET_KEY used), to move them onto GPUPOOL_FERNET_KEY")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            changed = secrets_rotate(with_secret_key=opts["from_secret_key"])
        except (ValueError, ImproperlyConfigured) as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"{changed} secret(s) re-encrypted with the first key of GPUPOOL_FERNET_KEY")
