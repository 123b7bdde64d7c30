from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from allocation.economy.chargeback import UsageQuery, chargeback, report_csv, report_json, report_text
from allocation.economy.usage import GROUP_BY
from core.errors import DomainError


def _moment(value: str) -> datetime:
    """An ISO 8601 date or time; without a zone it is UTC."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(f"not an ISO 8601 date or time: {value!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class _Everyone:
    """The command runs as the operator: a pool admin, who sees every team."""

    pk = None
    is_authenticated = True
    is_staff = True


class Command(BaseCommand):
    help = ("GPU-hours (and cost, when prices are configured) per team, pool, model, user or day over a "
            "window (default: this month so far); the chargeback report of GET /api/v1/usage/.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", help="Only this team.")
        parser.add_argument("--pool", help="Only this pool.")
        parser.add_argument("--since", type=_moment, help="Window start, ISO 8601 (UTC when no zone is given).")
        parser.add_argument("--until", type=_moment, help="Window end, ISO 8601 (default: now).")
        parser.add_argument("--group-by", choices=GROUP_BY, default="team")
        parser.add_argument("-o", "--output", choices=("table", "json", "csv"), default="table")

    def handle(self, *args: Any, **opts: Any) -> None:
        query = UsageQuery(team=opts["team"], pool=opts["pool"], since=opts["since"], until=opts["until"],
                           group_by=opts["group_by"])
        try:
            report = chargeback(user=_Everyone(), query=query)
        except DomainError as exc:
            raise CommandError(exc.message) from None
        if opts["output"] == "json":
            self.stdout.write(json.dumps(report_json(report), indent=2))
        elif opts["output"] == "csv":
            self.stdout.write(report_csv(report), ending="")
        else:
            self.stdout.write(report_text(report))
