from __future__ import annotations

from typing import Any

import yaml
from django.core.management.base import BaseCommand

from allocation.config.apply import config_export


class Command(BaseCommand):
    help = "Print the configuration in the format `apply -f` reads (secrets left out)."

    def handle(self, *args: Any, **opts: Any) -> None:
        self.stdout.write(yaml.safe_dump(config_export(), sort_keys=False, allow_unicode=True))
