"""Apply a validated configuration to the database, idempotently, all or nothing; and export it.

`config_apply` returns the list of changes in words ("+ team vision", "~ quota vision@training:
limit 8 → 16"); applying the same file twice returns an empty list the second time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from allocation import running_usage
from allocation.audit import audit
from allocation.config import POOL_SCHEDULER_KEYS, Config, ConfigError, PoolSchedulerSpec, SchedulerSpec
from allocation.config.apply_budgets import (
    apply_budgets,
    apply_prices,
    export_budgets,
    export_prices,
    prune_budgets_and_prices,
)
from allocation.config.apply_notifications import (
    apply_notifications,
    check_notification_teams,
    export_notifications,
    prune_notifications,
)
from allocation.config.apply_sso import (
    adopt_members,
    apply_sso,
    export_sso,
    prune_sso,
    sso_members,
    sso_reference_errors,
)
from allocation.config.apply_topology import apply_topology, export_topology
from allocation.config.apply_tree import apply_parents, team_export, tree_reference_errors
from allocation.config.idle import idle_reclaim_export
from allocation.config.queue_caps import queue_caps_export
from allocation.models import (
    IdleReclaimFields,
    PoolScheduling,
    PriorityClass,
    QueueBound,
    Quota,
    SchedulerSettings,
    Team,
)
from allocation.policy.admission import DEFAULT_QUEUE_CAPS, QueueCaps
from allocation.policy.idle import IdleReclaim
from allocation.services.budgets import budgets_refresh
from inventory.models import Pool, Source
from inventory.secrets import source_secrets_open, source_secrets_seal, source_secrets_split
from inventory.services import hosts_probe_soon

SCHEDULER_KEYS = tuple(SchedulerSpec.__dataclass_fields__)


def _set(obj: Any, values: dict[str, Any], label: str, changes: list[str]) -> bool:
    diffs = [f"{k} {getattr(obj, k)!r} → {v!r}" for k, v in values.items() if getattr(obj, k) != v]
    if diffs:
        for key, value in values.items():
            setattr(obj, key, value)
        changes.append(f"~ {label}: " + ", ".join(diffs))
    return bool(diffs)


def _check_references(cfg: Config) -> None:
    pools = {p.name for p in cfg.pools} | set(Pool.objects.values_list("name", flat=True))
    teams = {t.name for t in cfg.teams} | set(Team.objects.values_list("name", flat=True))
    errors = []
    for q in cfg.quotas:
        if q.team not in teams:
            errors.append(f"quota {q.team}@{q.pool}: team {q.team!r} is not defined")
        if q.pool not in pools:
            errors.append(f"quota {q.team}@{q.pool}: pool {q.pool!r} is not defined")
    for s in cfg.sources:
        if s.pool not in pools:
            errors.append(f"source {s.name}: pool {s.pool!r} is not defined")
    for b in cfg.budgets:
        if b.team not in teams:
            errors.append(f"{b.label}: team {b.team!r} is not defined")
        if b.pool is not None and b.pool not in pools:
            errors.append(f"{b.label}: pool {b.pool!r} is not defined")
    errors += check_notification_teams(cfg, teams)
    errors += tree_reference_errors(cfg)
    errors.extend(sso_reference_errors(cfg, teams))
    if errors:
        raise ConfigError(errors)


def config_apply(cfg: Config, *, actor: str = "system:apply", prune: bool = False,
                 dry_run: bool = False) -> list[str]:
    """Create or update everything the config names (delete nothing unless `prune`), in one
    transaction, audited as one event; returns the changes in words ("+ pool p", "~ quota …")."""
    _check_references(cfg)
    changes: list[str] = []
    with transaction.atomic():
        pools = _apply_pools(cfg, changes)
        teams = _apply_teams(cfg, changes)
        apply_parents(cfg, teams, changes)
        apply_sso(cfg, teams, changes)
        _apply_quotas(cfg, teams, pools, changes)
        _apply_priority_classes(cfg, changes)
        _apply_scheduler(cfg, changes)
        apply_topology(cfg, changes)
        _apply_sources(cfg, pools, changes)
        budgets_changed = apply_budgets(cfg, teams, pools, changes)
        apply_prices(cfg, changes)
        apply_notifications(cfg, changes)
        if prune:
            changes.extend(_prune(cfg))
            changes.extend(prune_budgets_and_prices(cfg))
            changes.extend(prune_notifications(cfg))
            changes.extend(prune_sso(cfg))
        if budgets_changed:
            budgets_refresh(now=timezone.now())  # the new limits' standing, at once
        if changes:
            audit(actor=actor, action="config.apply", obj="config", message="\n".join(changes),
                  data={"changes": changes}).save()
        if dry_run:
            transaction.set_rollback(True)
    return changes


def _apply_pools(cfg: Config, changes: list[str]) -> dict[str, Pool]:
    pools = {p.name: p for p in Pool.objects.all()}
    for spec in cfg.pools:
        pool = pools.get(spec.name)
        values = {"description": spec.description, "share_across_teams": spec.share_across_teams}
        if pool is None:
            pools[spec.name] = Pool.objects.create(name=spec.name, **values)
            changes.append(f"+ pool {spec.name}")
        elif _set(pool, values, f"pool {spec.name}", changes):
            pool.save()
        if spec.scheduler is not None:
            _apply_pool_scheduler(pools[spec.name], spec.scheduler, changes)
        _apply_pool_idle_reclaim(pools[spec.name], spec.idle_reclaim, changes)
        _apply_pool_queue_caps(pools[spec.name], spec.queue_caps, changes)
    return pools


def _apply_pool_queue_caps(pool: Pool, caps: QueueCaps, changes: list[str]) -> None:
    """The pool's `queue_caps`, as the file gives them: absent is the defaults (a pool without a
    scheduling row has them already)."""
    row = PoolScheduling.objects.filter(pool=pool).first()
    if row is None:
        if caps == DEFAULT_QUEUE_CAPS:
            return
        row = PoolScheduling(pool=pool)
    if _set(row, asdict(caps), f"pool {pool.name} queue_caps", changes):
        row.save()
        if caps.pending_leases_per_team is None and caps.pending_gpus_per_team is None:
            # Nothing reads the pool's queue bounds any more; left there, the lease trigger
            # would go on locking and raising them at every create (allocation.models.queues).
            # Caps given again later start from a count, as a queue with no bound does.
            QueueBound.objects.filter(pool_id=pool.pk).delete()


def _apply_pool_idle_reclaim(pool: Pool, rule: IdleReclaim | None, changes: list[str]) -> None:
    """The pool's `idle_reclaim`, as the file gives it: absent or null turns it off."""
    row = PoolScheduling.objects.filter(pool=pool).first()
    if row is None:
        if rule is None:
            return
        row = PoolScheduling(pool=pool)
    if _set(row, IdleReclaimFields.idle_values(rule), f"pool {pool.name} idle_reclaim", changes):
        row.save()


def _apply_pool_scheduler(pool: Pool, spec: PoolSchedulerSpec, changes: list[str]) -> None:
    """The pool's own scheduler settings, exactly as the file gives them: a key it leaves out
    goes back to the `scheduler:` section's value."""
    row = PoolScheduling.objects.filter(pool=pool).first() or PoolScheduling(pool=pool)
    values = {key: getattr(spec, key) for key in POOL_SCHEDULER_KEYS}
    if row._state.adding:
        if any(value is not None for value in values.values()):
            for key, value in values.items():
                setattr(row, key, value)
            row.save()
            changes.append(f"+ scheduler settings of pool {pool.name}")
    elif _set(row, values, f"pool {pool.name} scheduler", changes):
        row.save()


def _apply_teams(cfg: Config, changes: list[str]) -> dict[str, Team]:
    teams = {t.name: t for t in Team.objects.prefetch_related("members")}
    for spec in cfg.teams:
        team = teams.get(spec.name)
        if team is None:
            team = teams[spec.name] = Team.objects.create(name=spec.name, weight=spec.weight)
            changes.append(f"+ team {spec.name}")
        elif _set(team, {"weight": spec.weight}, f"team {spec.name}", changes):
            team.save()
        _add_members(team, spec.members, changes)
    return teams


def _add_members(team: Team, members: Sequence[str], changes: list[str]) -> None:
    """Members named in the config join the team (users are created without a password: they log
    in through whatever the deployment configures); members not named are left alone. A member
    single sign-on had added is the config's from now on (allocation.config.apply_sso)."""
    user_model = get_user_model()
    current = {u.username for u in team.members.all()}
    for name in sorted(set(members) - current):
        user, created = user_model.objects.get_or_create(username=name)
        if created:
            user.set_unusable_password()
            user.save()
        team.members.add(user)
        changes.append(f"+ member {name} of team {team.name}")
    adopt_members(team, members, changes)


def _apply_quotas(cfg: Config, teams: dict[str, Team], pools: dict[str, Pool], changes: list[str]) -> None:
    quotas = {(q.team.name, q.pool.name): q for q in Quota.objects.select_related("team", "pool")}
    for spec in cfg.quotas:
        quota = quotas.get((spec.team, spec.pool))
        values = {"guaranteed": spec.guaranteed, "limit": spec.limit,
                  "lending_limit": spec.lending_limit}
        if quota is None:
            Quota.objects.create(team=teams[spec.team], pool=pools[spec.pool], **values)
            lending = ("" if spec.lending_limit is None
                       else f", lending limit {spec.lending_limit}")
            changes.append(f"+ quota {spec.team}@{spec.pool}: guaranteed {spec.guaranteed}, "
                           f"limit {spec.limit if spec.limit is not None else 'none'}{lending}")
        elif _set(quota, values, f"quota {spec.team}@{spec.pool}", changes):
            quota.save()


def _quota_export(quota: Quota) -> dict[str, Any]:
    """A quota as the file writes it; `lending_limit` only when set (null: all may be lent)."""
    item: dict[str, Any] = {"team": quota.team.name, "pool": quota.pool.name,
                            "guaranteed": quota.guaranteed, "limit": quota.limit}
    if quota.lending_limit is not None:
        item["lending_limit"] = quota.lending_limit
    return item


def _apply_priority_classes(cfg: Config, changes: list[str]) -> None:
    classes = {c.name: c for c in PriorityClass.objects.all()}
    for spec in cfg.priority_classes:
        values = {"value": spec.value, "preemptible": spec.preemptible,
                  "min_runtime_s": spec.min_runtime_s, "grace_s": spec.grace_s,
                  **IdleReclaimFields.idle_values(spec.idle_reclaim)}
        pc = classes.get(spec.name)
        if pc is None:
            PriorityClass.objects.create(name=spec.name, **values)
            changes.append(f"+ priority class {spec.name} (value {spec.value})")
        elif _set(pc, values, f"priority class {spec.name}", changes):
            pc.save()


def _apply_scheduler(cfg: Config, changes: list[str]) -> None:
    if cfg.scheduler is None:
        return
    sched = SchedulerSettings.current()
    values = {key: getattr(cfg.scheduler, key) for key in SCHEDULER_KEYS}
    if sched._state.adding:
        for key, value in values.items():
            setattr(sched, key, value)
        sched.save()
        changes.append("+ scheduler settings")
    elif _set(sched, values, "scheduler", changes):
        sched.save()
    if running_usage.half_life_changed():  # the grant weights are the half-life's (allocation.running_usage)
        running_usage.rebuild()


def _apply_sources(cfg: Config, pools: dict[str, Pool], changes: list[str]) -> None:
    sources = {s.name: s for s in Source.objects.all()}
    for spec in cfg.sources:
        options, secrets = source_secrets_split(spec.kind, spec.options)
        values = {"kind": spec.kind, "pool": pools[spec.pool], "config": options,
                  "interval_s": spec.interval_s}
        src = sources.get(spec.name)
        if src is None:
            Source.objects.create(name=spec.name, secret=source_secrets_seal(spec.kind, secrets), **values)
            changes.append(f"+ source {spec.name} ({spec.kind})")
            continue
        dirty = _set(src, values, f"source {spec.name}", changes)
        if secrets and source_secrets_open(spec.kind, src.secret) != secrets:
            src.secret = source_secrets_seal(spec.kind, secrets)
            changes.append(f"~ source {spec.name}: {', '.join(secrets).replace('_', ' ')} replaced")
            dirty = True
        if dirty:
            src.save()
            hosts_probe_soon(source=src)  # a fixed address or key should not wait out a backoff


def _prune(cfg: Config) -> list[str]:
    changes = []
    keep_q = {(q.team, q.pool) for q in cfg.quotas}
    for q in Quota.objects.select_related("team", "pool"):
        if (q.team.name, q.pool.name) not in keep_q:
            q.delete()
            changes.append(f"- quota {q.team.name}@{q.pool.name}")
    for source in Source.objects.exclude(name__in={s.name for s in cfg.sources}):
        source.delete()
        changes.append(f"- source {source.name}")
    for pc in PriorityClass.objects.exclude(name__in={p.name for p in cfg.priority_classes}):
        if pc.leases.exists():
            continue  # still referenced by lease history
        pc.delete()
        changes.append(f"- priority class {pc.name}")
    return changes


def config_export() -> dict[str, Any]:
    """The database's configuration in the same format `apply` reads (secrets left out)."""
    teams = list(Team.objects.select_related("parent").prefetch_related("members"))
    from_sso = sso_members(t.pk for t in teams)  # the provider's to give, not the file's
    data: dict[str, Any] = {
        "pools": [_export_pool(p) for p in Pool.objects.select_related("scheduling")],
        "teams": [team_export(t, sorted(u.username for u in t.members.all()
                                        if u.username not in from_sso.get(t.pk, ())))
                  for t in teams],
        "quotas": [_quota_export(q) for q in Quota.objects.select_related("team", "pool")],
        "priority_classes": [_export_priority_class(c) for c in PriorityClass.objects.all()],
    }
    sched = SchedulerSettings.objects.filter(pk=1).first()
    if sched is not None:
        data["scheduler"] = {key: getattr(sched, key) for key in SCHEDULER_KEYS}
    export_topology(data)
    data["sources"] = [{"name": s.name, "kind": s.kind, "pool": s.pool.name,
                        "interval_s": s.interval_s, **s.config}
                       for s in Source.objects.select_related("pool")]
    data["budgets"] = export_budgets()
    data["prices"] = export_prices()
    data["notifications"] = export_notifications()
    sso = export_sso()
    if sso is not None:
        data["sso"] = sso
    for weight_holder in data["teams"]:
        if float(weight_holder["weight"]).is_integer():
            weight_holder["weight"] = int(weight_holder["weight"])
    return data


def _export_pool(pool: Pool) -> dict[str, Any]:
    data: dict[str, Any] = {"name": pool.name, "description": pool.description,
                            "share_across_teams": pool.share_across_teams}
    scheduling = getattr(pool, "scheduling", None)
    overrides = scheduling.overrides() if scheduling is not None else {}
    if overrides:
        data["scheduler"] = overrides
    idle = idle_reclaim_export(scheduling.idle_reclaim) if scheduling is not None else None
    if idle is not None:
        data["idle_reclaim"] = idle
    caps = queue_caps_export(scheduling.queue_caps) if scheduling is not None else None
    if caps is not None:
        data["queue_caps"] = caps
    return data


def _export_priority_class(pc: PriorityClass) -> dict[str, Any]:
    data: dict[str, Any] = {"name": pc.name, "value": pc.value, "preemptible": pc.preemptible,
                            "min_runtime_s": pc.min_runtime_s, "grace_s": pc.grace_s}
    idle = idle_reclaim_export(pc.idle_reclaim)
    if idle is not None:
        data["idle_reclaim"] = idle
    return data
