from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Give the demo users a password (kept in var/demo-password) and an admin; print the login."

    def handle(self, *args: Any, **opts: Any) -> None:
        path = settings.VAR_DIR / "demo-password"
        if not path.exists():
            path.write_text(secrets.token_urlsafe(9))
            path.chmod(0o600)
        password = path.read_text().strip()
        User = get_user_model()
        admin, _ = User.objects.get_or_create(username="admin")
        admin.is_staff = admin.is_superuser = True
        admin.set_password(password)
        admin.save()
        for user in User.objects.filter(teams__isnull=False).distinct():
            if not user.has_usable_password():
                user.set_password(password)
                user.save()
        self.stdout.write(f"admin / {password}  (pool admin); alice / {password}  (team vision)")
