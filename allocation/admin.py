"""Django admin for allocation. Edits made here are audited like the API's; leases change state
only through their services (release), and the audit log, ledger and lease↔GPU links are
read-only."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from allocation.audit import audit
from allocation.models import (
    AuditEvent,
    Budget,
    IdleUsage,
    Lease,
    LeaseGpu,
    LeaseUsage,
    Notification,
    NotificationDelivery,
    Price,
    PriorityClass,
    Quota,
    SchedulerSettings,
    Team,
    UsageLedger,
)
from allocation.notify.send import deliveries_retry
from allocation.notify.subscriptions import notifications_enable
from allocation.services.admin import host_admin_action
from allocation.services.leases import lease_release
from inventory import admin as inventory_admin
from inventory.admin import PoolAdminAccess, ReadOnlyAccess
from inventory.models import Host


def _host_action(verb: str) -> Any:
    def action(modeladmin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Host]) -> None:
        for host in queryset:
            host_admin_action(host=host, verb=verb, actor=request.user.get_username())
        modeladmin.message_user(request, f"{verb}: {queryset.count()} host(s)", messages.SUCCESS)

    action.__name__ = f"host_{verb}"
    return admin.action(description=f"{verb.capitalize()} selected hosts (audited)")(action)


# The inventory's host admin, with the actions that involve leases (the API does the same:
# allocation.api.fleet extends the inventory's viewsets).
admin.site.unregister(Host)


@admin.register(Host)
class HostAdmin(inventory_admin.HostAdmin):
    actions = [_host_action("cordon"), _host_action("drain"), _host_action("uncordon")]


class AuditedAdmin(PoolAdminAccess, admin.ModelAdmin[Any]):
    """Writes an AuditEvent for every add, change and delete made in the admin."""

    def save_model(self, request: HttpRequest, obj: Any, form: ModelForm[Any], change: bool) -> None:
        super().save_model(request, obj, form, change)
        before = {k: form.initial.get(k) for k in form.changed_data} if change else {}
        after = {k: form.cleaned_data.get(k) for k in form.changed_data}
        verb = "update" if change else "create"
        audit(actor=request.user.get_username(), action=f"{type(obj).__name__.lower()}.{verb}", obj=obj,
              message=f"{verb}d {obj} in the admin: {', '.join(form.changed_data) or 'no field changed'}",
              data={"before": before, "after": after, "via": "admin"}).save()

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        event = audit(actor=request.user.get_username(), action=f"{type(obj).__name__.lower()}.delete", obj=obj,
                      message=f"deleted {obj} in the admin", data={"via": "admin"})
        super().delete_model(request, obj)
        event.save()

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(Team)
class TeamAdmin(AuditedAdmin):
    list_display = ["name", "weight", "member_count"]
    search_fields = ["name", "members__username"]
    filter_horizontal = ["members"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Team]:
        return cast("QuerySet[Team]", super().get_queryset(request).annotate(n_members=Count("members")))

    @admin.display(ordering="n_members", description="members")
    def member_count(self, obj: Team) -> int:
        return obj.n_members


@admin.register(Quota)
class QuotaAdmin(AuditedAdmin):
    list_display = ["team", "pool", "guaranteed", "limit", "lending_limit"]
    list_filter = ["pool", "team"]
    search_fields = ["team__name", "pool__name"]
    list_select_related = ["team", "pool"]


@admin.register(PriorityClass)
class PriorityClassAdmin(AuditedAdmin):
    list_display = ["name", "value", "preemptible", "min_runtime_s", "grace_s"]
    list_filter = ["preemptible"]
    search_fields = ["name"]


@admin.action(description="Release selected leases (audited, as their owner would)")
def release_leases(modeladmin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Lease]) -> None:
    for lease in queryset:
        lease_release(lease=lease, actor=request.user.get_username(), reason=f"released in the admin by "
                      f"{request.user.get_username()}")
    modeladmin.message_user(request, f"released {queryset.count()} lease(s)", messages.SUCCESS)


class LeaseGpuInline(admin.TabularInline[LeaseGpu, Lease]):
    model = LeaseGpu
    fields = ["gpu", "active"]
    readonly_fields = ["gpu", "active"]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Lease)
class LeaseAdmin(PoolAdminAccess, admin.ModelAdmin[Lease]):
    """Leases are looked at here; their state only moves through the state machine (release)."""

    list_display = ["id", "state", "team", "user", "pool", "gpu_count", "borrowed", "priority_class", "host",
                    "created_at", "expires_at"]
    list_filter = ["state", "pool", "team", "borrowed", "priority_class", "binding_kind"]
    search_fields = ["id", "team__name", "user__username", "reason", "host__name"]
    list_select_related = ["team", "user", "pool", "priority_class", "host"]
    date_hierarchy = "created_at"
    inlines = [LeaseGpuInline]
    actions = [release_leases]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Lease._meta.fields]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(LeaseGpu)
class LeaseGpuAdmin(ReadOnlyAccess, admin.ModelAdmin[LeaseGpu]):
    list_display = ["lease", "gpu", "active"]
    list_filter = ["active", "gpu__pool"]
    search_fields = ["lease__id", "gpu__uuid"]
    list_select_related = ["lease", "gpu"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAccess, admin.ModelAdmin[AuditEvent]):
    list_display = ["at", "actor", "action", "object_type", "object_id", "lease", "message"]
    list_filter = ["action", "object_type"]
    search_fields = ["actor", "action", "object_id", "message"]
    date_hierarchy = "at"


@admin.register(UsageLedger)
class UsageLedgerAdmin(ReadOnlyAccess, admin.ModelAdmin[UsageLedger]):
    """Rebuilt from lease rows by `manage.py rebuild_ledger`; never edited by hand."""

    list_display = ["team", "stripe", "closed_gpu_hours", "as_of"]
    list_select_related = ["team"]
    search_fields = ["team__name"]

    @admin.display(ordering="closed_usage", description="closed usage (GPU-h, decayed)")
    def closed_gpu_hours(self, obj: UsageLedger) -> str:
        return f"{obj.closed_usage / 3600:.1f}"


@admin.register(SchedulerSettings)
class SchedulerSettingsAdmin(AuditedAdmin):
    list_display = ["__str__", "fair_share_half_life_hours", "pass_interval_s"]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        # One row (pk=1), as the configuration's `scheduler:` section.
        return super().has_add_permission(request) and not SchedulerSettings.objects.exists()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Budget)
class BudgetAdmin(ReadOnlyAccess, admin.ModelAdmin[Budget]):
    """Budgets come from the configuration (`apply`); their standing from the meter."""

    list_display = ["team", "pool", "period", "gpu_hours", "action", "used_gpu_hours", "used_as_of", "warned_pct"]
    list_filter = ["period", "action"]
    list_select_related = ["team", "pool"]
    search_fields = ["team__name", "pool__name"]


@admin.register(Price)
class PriceAdmin(ReadOnlyAccess, admin.ModelAdmin[Price]):
    list_display = ["model", "per_gpu_hour"]
    search_fields = ["model"]


@admin.register(LeaseUsage)
class LeaseUsageAdmin(ReadOnlyAccess, admin.ModelAdmin[LeaseUsage]):
    """The GPU-hour meter: one row per grant, written by the engine and the lease state machine."""

    list_display = ["lease", "team", "pool", "model", "gpu_equiv", "started_at", "ended_at"]
    list_filter = ["pool", "team"]
    list_select_related = ["lease", "team", "pool"]
    search_fields = ["lease__id", "team__name", "model"]
    date_hierarchy = "started_at"


@admin.register(IdleUsage)
class IdleUsageAdmin(ReadOnlyAccess, admin.ModelAdmin[IdleUsage]):
    """Allocated but idle GPU-seconds per team, pool, user, model and UTC hour, written by the idle check."""

    list_display = ["team", "pool", "user", "model", "hour", "gpu_seconds"]
    list_filter = ["pool", "team"]
    list_select_related = ["team", "pool", "user"]
    search_fields = ["team__name", "user__username", "model"]
    date_hierarchy = "hour"


@admin.action(description="Enable selected notifications again (audited)")
def enable_notifications(modeladmin: admin.ModelAdmin[Any], request: HttpRequest,
                         queryset: QuerySet[Notification]) -> None:
    changed = notifications_enable(ids=list(queryset.values_list("pk", flat=True)), actor=request.user.get_username())
    modeladmin.message_user(request, f"enabled {changed} notification(s)", messages.SUCCESS)


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAccess, admin.ModelAdmin[Notification]):
    """Configured targets come from `apply`, users' from the API: looked at here, and enabled
    again once a receiver that answered 410 is back."""

    list_display = ["name", "user", "kind", "url", "events", "teams", "enabled", "disabled_reason"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name", "user__username", "url"]
    list_select_related = ["user"]
    exclude = ["secret"]
    actions = [enable_notifications]


@admin.action(description="Send selected deliveries again now")
def retry_deliveries(modeladmin: admin.ModelAdmin[Any], request: HttpRequest,
                     queryset: QuerySet[NotificationDelivery]) -> None:
    changed = deliveries_retry(ids=list(queryset.values_list("pk", flat=True)))
    modeladmin.message_user(request, f"{changed} deliveries due again", messages.SUCCESS)


@admin.register(NotificationDelivery)
class NotificationDeliveryAdmin(ReadOnlyAccess, admin.ModelAdmin[NotificationDelivery]):
    """The delivery log: every event sent to every target, its attempts and outcome."""

    list_display = ["created_at", "event", "target", "state", "attempts", "last_status", "last_error", "lease_id",
                    "team"]
    list_filter = ["state", "event", "kind"]
    search_fields = ["target", "event_key", "lease_id", "team", "last_error"]
    date_hierarchy = "created_at"
    actions = [retry_deliveries]
