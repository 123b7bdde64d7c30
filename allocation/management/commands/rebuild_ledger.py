from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.utils import timezone

from allocation.ledger import rebuild_ledger


class Command(BaseCommand):
    help = "Recompute the fair-share ledger (decayed GPU-seconds per team) from lease rows."

    def handle(self, *args: Any, **opts: Any) -> None:
        used = rebuild_ledger(timezone.now())
        self.stdout.write(f"ledger rebuilt from {used} ended lease(s)")
