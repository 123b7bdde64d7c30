"""`apitoken USERNAME [--admin] [--team T] [--read-only] [--expires-days N] [--name NAME]` prints a
new API token for USERNAME (created if needed) as its last line. Each call issues another token;
earlier ones keep working until they expire or are revoked. The key is shown only here: the
database keeps its digest.

`apitoken --list USERNAME` lists a user's tokens (prefix, name, scope, dates, state);
`apitoken --revoke PREFIX` revokes the one token whose key starts with PREFIX."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import DomainError
from core.models import ApiToken, TokenScope
from core.tokens import token_by_prefix, token_issue, token_revoke


class Command(BaseCommand):
    help = ("Print a new API token for USERNAME (created if needed) as the last line; "
            "--list USERNAME lists a user's tokens, --revoke PREFIX revokes one.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", nargs="?")
        parser.add_argument("--admin", action="store_true",
                            help="make the user a pool admin (sees all teams, moves capacity)")
        parser.add_argument("--team", action="append", default=[], help="add the user to a team")
        parser.add_argument("--read-only", action="store_true",
                            help="a token for GET/HEAD/OPTIONS only (dashboards, CI)")
        parser.add_argument("--expires-days", type=int, default=None, metavar="N",
                            help="the token stops working after N days (default: never)")
        parser.add_argument("--name", default="", help="what the token is for, shown by --list")
        parser.add_argument("--list", action="store_true", help="list USERNAME's tokens instead")
        parser.add_argument("--revoke", metavar="PREFIX", help="revoke the token whose key starts with PREFIX")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            if opts["revoke"]:
                self._revoke(opts["revoke"])
            elif opts["list"]:
                self._list(self._username(opts))
            else:
                self._issue(self._username(opts), opts)
        except DomainError as error:
            raise CommandError(error.message) from None

    @staticmethod
    def _username(opts: dict[str, Any]) -> str:
        if not opts["username"]:
            raise CommandError("USERNAME is required (or --revoke PREFIX)")
        return str(opts["username"])

    def _issue(self, username: str, opts: dict[str, Any]) -> None:
        from allocation.models import Team

        days = opts["expires_days"]
        if days is not None and days <= 0:
            raise CommandError("--expires-days must be a positive number of days")
        user, created = get_user_model().objects.get_or_create(username=username)
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
        scope = TokenScope.READ if opts["read_only"] else TokenScope.WRITE
        key = token_issue(user=user, name=opts["name"], scope=scope,
                          expires_in=timedelta(days=days) if days else None)
        expiry = f"expires in {days} days" if days else "never expires"
        self.stdout.write(f"new {scope} token {key[:8]}… for {user.username}, {expiry}")
        self.stdout.write(key)

    def _list(self, username: str) -> None:
        tokens = ApiToken.objects.filter(user__username=username).order_by("created_at")
        self.stdout.write(f"{'PREFIX':<10} {'SCOPE':<6} {'STATE':<8} {'CREATED':<17} {'EXPIRES':<17} "
                          f"{'LAST USED':<17} NAME")
        for token in tokens:
            self.stdout.write(f"{token.prefix:<10} {token.scope:<6} {token.state:<8} {_when(token.created_at):<17} "
                              f"{_when(token.expires_at):<17} {_when(token.last_used_at):<17} {token.name}")

    def _revoke(self, prefix: str) -> None:
        token = token_by_prefix(prefix)
        changed = token_revoke(token=token, by="manage.py apitoken --revoke")
        what = "revoked" if changed else "was already revoked"
        self.stdout.write(f"token {token.prefix}… of {token.user.username} {what}")


def _when(moment: Any) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") if moment is not None else "-"
