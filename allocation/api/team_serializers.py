"""Serializers of the team API (`allocation.api.teams`, `allocation.api.team_tree`): teams with
their GPU-hour budgets and fair share, quotas and their updates, priority classes. Every field
carries help_text, which is the API documentation (tests/api/test_openapi_schema.py checks it)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from allocation.api.serializers import StrictSerializer
from allocation.models import PriorityClass, Quota, Team
from allocation.policy.budgets import THRESHOLDS, BudgetStatus


class BudgetStatusSerializer(serializers.Serializer[Any]):
    """A budget and its use in the current period (read by the team API and the dashboard)."""

    pool = serializers.CharField(source="budget.pool", allow_null=True, help_text="Pool; null: all pools.")
    period = serializers.CharField(source="budget.period", help_text="week, month or quarter (UTC).")
    action = serializers.CharField(source="budget.action", help_text="warn, block_new or lower_priority.")
    gpu_hours = serializers.FloatField(source="budget.gpu_hours", help_text="The budget, GPU-hours per period.")
    used_gpu_hours = serializers.SerializerMethodField(help_text="Used this period, GPU-hours.")
    used_pct = serializers.SerializerMethodField(help_text="Used this period, percent of the budget.")
    period_start = serializers.DateTimeField(help_text="Start of the current period.")
    resets_at = serializers.DateTimeField(help_text="When the period ends and the budget resets.")
    warning = serializers.SerializerMethodField(help_text="Past 80% or 100%: the warning in words; else empty.")

    def get_used_gpu_hours(self, obj: BudgetStatus) -> float:
        return round(obj.used_gpu_hours, 4)

    def get_used_pct(self, obj: BudgetStatus) -> float:
        return round(obj.pct, 1)

    def get_warning(self, obj: BudgetStatus) -> str:
        reached = [t for t in THRESHOLDS if obj.pct >= t]
        return f"{max(reached)}% of budget: {obj.describe()}" if reached else ""


class TeamSerializer(serializers.ModelSerializer[Any]):
    members: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", many=True, read_only=True, help_text="User names of the members.")
    gpus_held = serializers.IntegerField(read_only=True, help_text="GPUs the team holds now, all pools.")
    fair_share = serializers.FloatField(read_only=True,
                                        help_text="Decayed GPU-hours ÷ weight; lower is served first.")
    decayed_usage_gpu_hours = serializers.FloatField(read_only=True,
                                                     help_text="Usage with the configured half-life, GPU-hours.")
    budgets = BudgetStatusSerializer(source="budget_standing", many=True, read_only=True,
                                     help_text="The team's GPU-hour budgets and their use this period.")

    class Meta:
        model = Team
        fields = ["id", "name", "weight", "members", "gpus_held", "decayed_usage_gpu_hours", "fair_share", "budgets"]
        extra_kwargs = {"id": {"help_text": "Numeric id."}, "name": {"help_text": "Team name."},
                        "weight": {"help_text": "Fair-share weight (2 = twice the share of 1)."}}


class QuotaSerializer(serializers.ModelSerializer[Any]):
    team = serializers.CharField(source="team.name", read_only=True, help_text="Team name.")
    pool = serializers.CharField(source="pool.name", read_only=True, help_text="Pool name.")
    used = serializers.IntegerField(read_only=True, help_text="GPUs the team holds in the pool.")
    borrowed = serializers.IntegerField(read_only=True, help_text="Of those, GPUs beyond the guarantee.")
    pending = serializers.IntegerField(read_only=True, help_text="GPUs asked by the team's pending leases.")

    class Meta:
        model = Quota
        fields = ["id", "team", "pool", "guaranteed", "limit", "lending_limit", "used", "borrowed", "pending"]
        read_only_fields = fields
        extra_kwargs = {"id": {"help_text": "Numeric id (used in the PATCH URL)."},
                        "guaranteed": {"help_text": "GPUs the team can always reach, by preemption if need be."},
                        "limit": {"help_text": "Ceiling on GPUs held; null: may borrow all idle GPUs."},
                        "lending_limit": {"help_text": "GPUs of the guarantee other teams may borrow while the "
                                                       "team leaves them idle (Kueue's lendingLimit; at most "
                                                       "`guaranteed`); null: all of it."}}


class QuotaUpdateSerializer(StrictSerializer):
    guaranteed = serializers.IntegerField(required=False, min_value=0, max_value=10**6,
                                          help_text="New guaranteed GPUs.")
    limit = serializers.IntegerField(required=False, min_value=0, max_value=10**6, allow_null=True,
                                     help_text="New limit; null removes the ceiling.")
    lending_limit = serializers.IntegerField(
        required=False, min_value=0, max_value=10**6, allow_null=True,
        help_text="New lending limit, at most the guarantee (the new one, if also given); null lets "
                  "all of the guarantee be lent.")


class PriorityClassSerializer(serializers.ModelSerializer[Any]):
    class Meta:
        model = PriorityClass
        fields = ["name", "value", "preemptible", "min_runtime_s", "grace_s"]
        extra_kwargs = {
            "name": {"help_text": "Name used in lease requests."},
            "value": {"help_text": "Higher values are served first and may preempt lower ones."},
            "preemptible": {"help_text": "Leases of this class may be preempted."},
            "min_runtime_s": {"help_text": "Not preempted before running this long."},
            "grace_s": {"help_text": "Notice a preempted workload gets before it is killed."},
        }
