from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Print an API token for USERNAME (created if needed) as the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--admin", action="store_true",
                            help="make the user a pool admin (sees all teams, moves capacity)")
        parser.add_argument("--team", action="append", default=[], help="add the user to a team")

    def handle(self, *args: Any, **opts: Any) -> None:
        from allocation.models import Team

        user, created = get_user_model().objects.get_or_create(username=opts["username"])
        if created:
            user.set_unusable_password()
            self.stdout.write(f"created user {user.username}")
        if opts["admin"] and not user.is_staff:
            user.is_staff = True
            self.stdout.write(f"{user.username} is now a pool admin")
        user.save()
        for name in opts["team"]:
            team, _ = Team.objects.get_or_create(name=name)
            team.members.add(user)
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(token.key)
