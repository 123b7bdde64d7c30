from __future__ import annotations

from io import StringIO
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = ("Prepare the demo in one process, as `make run` does before it starts the servers: migrate, "
            "apply the fleet file, discover, give the demo users a password; print the login last.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", nargs="?", default="examples/demo.yaml", help="the fleet file to apply")

    def handle(self, *args: Any, **opts: Any) -> None:
        # One process instead of four `manage.py` runs: each start imports Django and every app
        # (~1.5 s of CPU), which was most of `make run`'s wait before the servers started.
        call_command("migrate", interactive=False, verbosity=0)
        call_command("apply", "-f", opts["file"], stdout=self.stdout)
        call_command("discover", stdout=StringIO())
        call_command("demo_users", stdout=self.stdout)
