"""Reads for the role homes: the teams list, one team's page (quota and use per pool, leases,
queue, members, budgets, reservations) and the pools list. Built on the shared selectors
(`quota_list`, `team_gpus_held`, `pending_by_pool`, `lease_list`), so the numbers match the API and
the other pages; each read costs a fixed number of queries whatever the fleet's size (lists are cut
at `ROWS`, with their full counts beside them)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, F, QuerySet, Sum

from allocation.choices import HOLDING_STATES, LeaseState, ReservationState
from allocation.models import Lease, Quota, Reservation, Team
from allocation.policy.budgets import BudgetStatus
from allocation.selectors import lease_list, quota_list, team_gpus_held
from allocation.selectors.idle import idle_by_lease, idle_gpus_by_team_and_pool
from allocation.selectors.teams_tree import TeamNode, team_tree
from allocation.services.budgets import budget_statuses

ROWS = 25  # leases and queued requests shown on a team page; the rest are a link away


@dataclass
class TeamSummary:
    """A row of the teams list: the team, its quotas (with `used`, `borrowed`, `pending` set by
    `quota_list`), members and queue; `children` are its sub-teams when teams nest."""

    team: Team
    quotas: list[Quota] = field(default_factory=list)
    members: int = 0
    pending_leases: int = 0
    pending_gpus: int = 0
    children: list[TeamSummary] = field(default_factory=list)

    @property
    def held(self) -> int:
        return sum(q.used for q in self.quotas)

    @property
    def guaranteed(self) -> int:
        return sum(q.guaranteed for q in self.quotas)


def _pending_by_team(teams: QuerySet[Team] | list[Team]) -> dict[int, tuple[int, int]]:
    rows = (Lease.objects.filter(state=LeaseState.PENDING, team_id__in=[t.pk for t in teams])
            .values_list("team_id").annotate(n=Count("pk"), gpus=Sum("gpu_count")).order_by())
    return {team_id: (n, gpus or 0) for team_id, n, gpus in rows}


def team_summaries(*, user: Any, teams: QuerySet[Team]) -> list[TeamSummary]:
    """The visible `teams` (members prefetched), A to Z, each with its quotas and queue; a team
    whose `parent_id` (hierarchical teams, when the model has it) is another listed team is
    nested under that one instead of listed at the top."""
    rows = list(teams)
    quotas: dict[int, list[Quota]] = defaultdict(list)
    for quota in quota_list(user=user):
        quotas[quota.team_id].append(quota)
    pending = _pending_by_team(rows)
    summaries = {t.pk: TeamSummary(t, quotas.get(t.pk, []), len(t.members.all()), *pending.get(t.pk, (0, 0)))
                 for t in sorted(rows, key=lambda t: t.name)}
    top: list[TeamSummary] = []
    for summary in summaries.values():
        # getattr: the column comes with hierarchical teams; before it, every team is at the top.
        parent = summaries.get(getattr(summary.team, "parent_id", None) or 0)
        (parent.children if parent is not None else top).append(summary)
    return top


@dataclass
class TeamHome:
    """Everything a team's page shows."""

    team: Team
    quotas: list[tuple[Quota, int]]  # each quota with its allocated-but-idle GPUs
    leases: list[Lease]  # holding leases, newest first, at most ROWS
    leases_total: int
    queue: list[Lease]  # pending, in queue order, at most ROWS
    queue_total: int
    queue_gpus: int
    idle: dict[str, int]  # lease id → its idle GPUs
    budgets: list[BudgetStatus]
    reservations: list[Reservation]


def team_home(*, user: Any, team: Team, now: datetime) -> TeamHome:
    """`team`'s page as `user` sees it (the caller checked that the team is visible)."""
    quotas = quota_list(user=user, team_ids=[team.pk])
    idle_pools = {pool_id: n for (team_id, pool_id), n in idle_gpus_by_team_and_pool(now=now).items()
                  if team_id == team.pk}
    # Only what the rows show is joined: no GPU links (the lease's own page lists its GPUs).
    mine = lease_list(user=user, related=False).filter(team=team)
    shown = mine.select_related("pool", "user", "host", "priority_class")
    holding = mine.filter(state__in=HOLDING_STATES)
    leases = list(shown.filter(state__in=HOLDING_STATES)[:ROWS])
    pending = mine.filter(state=LeaseState.PENDING)
    queue = list(shown.filter(state=LeaseState.PENDING)
                 .order_by("pool__name", F("queue_position").asc(nulls_last=True), "created_at", "pk")[:ROWS])
    counts = pending.aggregate(n=Count("pk"), gpus=Sum("gpu_count"))
    idle = idle_by_lease([lease.pk for lease in leases], now=now)
    return TeamHome(
        team=team, quotas=[(q, idle_pools.get(q.pool_id, 0)) for q in quotas],
        leases=leases, leases_total=len(leases) if len(leases) < ROWS else holding.count(),
        queue=queue, queue_total=counts["n"] or 0, queue_gpus=counts["gpus"] or 0,
        idle={lease_id: entry.gpus for lease_id, entry in idle.items()},
        budgets=budget_statuses(team_ids=[team.pk], now=now),
        reservations=list(Reservation.objects.filter(team=team, state=ReservationState.ACTIVE, end__gt=now)
                          .select_related("pool").order_by("start", "pk")[:ROWS]))


@dataclass
class PoolTeam:
    """A team's standing in one pool, as the pools list shows it."""

    name: str
    held: int
    guaranteed: int
    limit: int | None


def pool_teams() -> dict[int, list[PoolTeam]]:
    """Per pool id: the teams with a quota there or GPUs held, most GPUs held first (two queries)."""
    held = team_gpus_held()
    names = dict(Team.objects.values_list("pk", "name"))
    teams: dict[int, dict[int, PoolTeam]] = defaultdict(dict)
    for team_id, pool_id, guaranteed, limit in Quota.objects.values_list("team_id", "pool_id", "guaranteed", "limit"):
        teams[pool_id][team_id] = PoolTeam(names[team_id], held.get((team_id, pool_id), (0, 0))[0], guaranteed, limit)
    for (team_id, pool_id), (gpus, _) in held.items():
        teams[pool_id].setdefault(team_id, PoolTeam(names[team_id], gpus, 0, 0))
    return {pool_id: sorted(rows.values(), key=lambda t: (-t.held, t.name)) for pool_id, rows in teams.items()}


def department(*, user: Any, team: Team) -> TeamNode | None:
    """`team` as a department: its node of the team tree, with the teams under it and every
    node's held, guaranteed, limit, borrowed and waiting GPUs per pool rolled up its subtree
    (`allocation.selectors.teams_tree`); None for a team with no teams under it."""
    if not Team.objects.filter(parent_id=team.pk).exists():
        return None
    for root in team_tree(user=user):
        for node in root.walk():
            if node.id == team.pk:
                base = node.depth  # indented from the department, wherever it sits in the tree
                for below in node.walk():
                    below.depth -= base
                return node
    return None


def member_home_team(user: Any) -> Team | None:
    """The team a member's first page shows: their first team A to Z; None for an admin's view
    or a user in no team."""
    return Team.objects.filter(members=user.pk).order_by("name").first()


