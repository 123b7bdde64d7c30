"""Every endpoint × {anonymous, member, member of another team, pool admin}: the status each gets.
The base case is tests/api/permission_rows.py; the REST resources' rows are here, the leases'
(and their streams on the ASGI front) in tests/api/test_permission_matrix_leases.py.

The list of rows (of both modules) is checked against what the server really serves
(tests/support/api_routes.py: the URLconf, the OpenAPI document, the ASGI front), as NetBox checks
its API test cases against its views: an endpoint without rows fails
`test_every_operation_has_permission_rows`, naming it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.urls import resolve
from django.utils import timezone

from tests.api.permission_rows import ADMIN_ONLY, OWN_TEAM, PUBLIC, EndpointPermissions, rows
from tests.api.test_permission_matrix_leases import AsgiEndpointPermissions  # and its rows, for the checks below
from tests.support.api_routes import (
    NOT_IN_SCHEMA,
    api_operations,
    api_routes,
    asgi_routes,
    schema_operations,
    template_of,
)

pytestmark = pytest.mark.django_db


class TestPoolList(EndpointPermissions):
    path = "/api/v1/pools/"


class TestPoolDetail(EndpointPermissions):
    path = "/api/v1/pools/training/"


class TestHostList(EndpointPermissions):
    path = "/api/v1/hosts/"


class TestHostDetail(EndpointPermissions):
    path = "/api/v1/hosts/{host}/"


class TestHostCordon(EndpointPermissions):
    method, path, expect = "post", "/api/v1/hosts/{host}/cordon/", ADMIN_ONLY


class TestHostDrain(EndpointPermissions):
    method, path, expect = "post", "/api/v1/hosts/{host}/drain/", ADMIN_ONLY


class TestHostUncordon(EndpointPermissions):
    method, path, expect = "post", "/api/v1/hosts/{host}/uncordon/", ADMIN_ONLY


class TestHostBulk(EndpointPermissions):
    method, path, expect = "post", "/api/v1/hosts/bulk/", ADMIN_ONLY
    body = {"action": "cordon", "filter": {}, "dry_run": True}


class TestHostForgetWorkloads(EndpointPermissions):
    method, path, expect = "post", "/api/v1/hosts/{host}/forget-workloads/", ADMIN_ONLY
    body = {"force": True, "reason": "decommissioned"}


class TestGpuList(EndpointPermissions):
    path = "/api/v1/gpus/"


class TestGpuDetail(EndpointPermissions):
    path = "/api/v1/gpus/{gpu}/"


class TestGpuMove(EndpointPermissions):
    method, path, body, expect = "post", "/api/v1/gpus/{gpu}/move/", {"pool": "inference"}, ADMIN_ONLY


class TestTeamList(EndpointPermissions):
    path = "/api/v1/teams/"


class TestTeamDetail(EndpointPermissions):
    path, expect = "/api/v1/teams/vision/", OWN_TEAM


class TestQuotaList(EndpointPermissions):
    path = "/api/v1/quotas/"


class TestQuotaDetail(EndpointPermissions):
    path, expect = "/api/v1/quotas/{quota}/", OWN_TEAM


class TestQuotaPatch(EndpointPermissions):
    method, path, body, expect = "patch", "/api/v1/quotas/{quota}/", {"limit": 20}, ADMIN_ONLY


class TestQuotaLendingLimitPatch(EndpointPermissions):
    method, path, body, expect = "patch", "/api/v1/quotas/{quota}/", {"lending_limit": 2}, ADMIN_ONLY


class TestPriorityClassList(EndpointPermissions):
    path = "/api/v1/priority-classes/"


class TestPriorityClassDetail(EndpointPermissions):
    path = "/api/v1/priority-classes/high/"


class TestAuditEventList(EndpointPermissions):
    path = "/api/v1/audit-events/"


class TestAuditEventDetail(EndpointPermissions):
    path, expect = "/api/v1/audit-events/{event}/", OWN_TEAM


class TestSchema(EndpointPermissions):
    path, expect = "/api/v1/schema/", PUBLIC


class TestSwaggerUi(EndpointPermissions):
    path, expect = "/api/docs/", PUBLIC


class TestApiRoot(EndpointPermissions):
    path = "/api/v1/"


class TestPoolMove(EndpointPermissions):
    method, path, expect = "post", "/api/v1/pools/inference/move/", ADMIN_ONLY

    def payload(self, world: Any) -> dict[str, Any]:
        return {"hosts": [world.host_id]}


class TestHostMove(EndpointPermissions):
    method, path, body, expect = "post", "/api/v1/hosts/{host}/move/", {"pool": "inference"}, ADMIN_ONLY


def _window(hours: float = 1) -> tuple[Any, Any]:
    start = timezone.now() + timedelta(hours=hours)
    return start, start + timedelta(hours=2)


class WithReservation(EndpointPermissions):
    """A reservation of alice's team (vision) in the training pool."""

    def keys(self, world: Any) -> dict[str, Any]:
        from allocation.services.reservations import reservation_create

        start, end = _window()
        made = reservation_create(user=world.member, pool="training", team="vision", gpus=1, start=start, end=end)
        return {"reservation": made.pk}


class TestReservationList(EndpointPermissions):
    path = "/api/v1/reservations/"  # everyone's: they shape every team's queue


class TestReservationCreateForTheMembersTeam(EndpointPermissions):
    method, path = "post", "/api/v1/reservations/"
    expect = {"anonymous": 401, "member": 201, "other": 403, "admin": 201}

    def payload(self, world: Any) -> dict[str, Any]:
        start, end = _window()
        return {"pool": "training", "team": "vision", "gpus": 1, "start": start.isoformat(), "end": end.isoformat()}


class TestReservationDetail(WithReservation):
    path = "/api/v1/reservations/{reservation}/"


class TestReservationCancel(WithReservation):
    method, path, body = "post", "/api/v1/reservations/{reservation}/cancel/", {}
    expect = {"anonymous": 401, "member": 200, "other": 403, "admin": 200}


class WithSubscription(EndpointPermissions):
    """A notification subscription of alice's, and one delivery of it."""

    def keys(self, world: Any) -> dict[str, Any]:
        from allocation.models import Notification, NotificationDelivery

        mine = Notification.objects.create(name="mine", user=world.member, kind="webhook",
                                           url="https://hooks.example.org/x", events=["lease.preempted"])
        sent = NotificationDelivery.objects.create(notification=mine, target="alice/mine", kind="webhook",
                                                   event="lease.preempted", event_key="lease-event-1",
                                                   occurred_at=timezone.now())
        return {"subscription": mine.pk, "delivery": sent.pk}


class TestNotificationSubscriptionList(EndpointPermissions):
    path = "/api/v1/notifications/subscriptions/"  # each user's own


class TestNotificationSubscriptionCreate(EndpointPermissions):
    method, path = "post", "/api/v1/notifications/subscriptions/"
    body = {"kind": "webhook", "url": "https://hooks.example.org/x", "events": ["lease.preempted"]}
    expect = {"anonymous": 401, "member": 201, "other": 201, "admin": 201}


class TestNotificationSubscriptionDetail(WithSubscription):
    path = "/api/v1/notifications/subscriptions/{subscription}/"
    expect = {"anonymous": 401, "member": 200, "other": 404, "admin": 404}


class TestNotificationSubscriptionDelete(WithSubscription):
    method, path = "delete", "/api/v1/notifications/subscriptions/{subscription}/"
    expect = {"anonymous": 401, "member": 204, "other": 404, "admin": 404}


class TestNotificationDeliveryList(EndpointPermissions):
    path = "/api/v1/notifications/deliveries/"  # admins: all; others: their subscriptions'


class TestNotificationDeliveryDetail(WithSubscription):
    path = "/api/v1/notifications/deliveries/{delivery}/"
    expect = {"anonymous": 401, "member": 200, "other": 404, "admin": 200}


class TestPoolHistory(EndpointPermissions):
    path = "/api/v1/history/pools/training/"


class TestTeamHistory(EndpointPermissions):
    path, expect = "/api/v1/history/teams/vision/", OWN_TEAM


class TestGpuHistory(EndpointPermissions):
    path = "/api/v1/history/gpus/{gpu}/"


class TestUsage(EndpointPermissions):
    path = "/api/v1/usage/"  # each caller's own teams (an admin: all)


class TestUsageOfOneTeam(EndpointPermissions):
    path = "/api/v1/usage/?team=vision"
    expect = {"anonymous": 401, "member": 200, "other": 403, "admin": 200}


# The CLI's single sign-on: anonymous by design (the caller has no token yet), so every role gets
# the same answer; here single sign-on is off (tests/frontend/test_sso_device_login.py has it on).
SSO_OFF = {"anonymous": 404, "member": 404, "other": 404, "admin": 404}


class TestSsoDeviceStart(EndpointPermissions):
    method, path, body, expect = "post", "/api/v1/auth/device/", {}, SSO_OFF


class TestSsoDeviceToken(EndpointPermissions):
    method, path, body, expect = "post", "/api/v1/auth/device/token/", {"device_code": "x"}, SSO_OFF


# --- the list of rows is the server's list of operations ----------------------------------------
def _covered(templates: set[str]) -> dict[tuple[str, str], list[str]]:
    covered: dict[tuple[str, str], list[str]] = {}
    for row in rows():
        template = template_of(row.path, templates)
        if template is not None:
            covered.setdefault((row.method, template), []).append(row.__name__)
    return covered


def test_every_operation_has_permission_rows(schema: dict[str, Any]) -> None:
    operations = schema_operations(schema) | api_operations()
    covered = _covered({path for _, path in operations})
    missing = sorted(f"{method.upper()} {path}" for method, path in operations - covered.keys())
    assert not missing, f"no permission rows for {missing}: add a subclass of EndpointPermissions " \
                        "(tests/api/test_permission_matrix*.py) with what each role gets"


def test_every_api_route_has_permission_rows() -> None:
    """Route by route as Django resolves them (catches a view left out of the OpenAPI document)."""
    routed = {resolve(row.path.split("?")[0].format(lease="0", host="0", gpu="0", quota="0", event="0",
                                                   reservation="0", subscription="0", delivery="0", key="0")).route
              for row in rows()}
    missing = sorted(r.template for r in api_routes() if r.route not in routed)
    assert not missing, f"no permission rows for the routes {missing}"


def test_every_path_of_the_asgi_front_has_permission_rows() -> None:
    on_asgi = [row.path.split("?")[0].format(lease="0") for row in rows()
               if issubclass(row, AsgiEndpointPermissions)]
    missing = sorted(name for name, pattern in asgi_routes().items()
                     if not any(pattern.match(path) for path in on_asgi))
    assert not missing, f"no permission rows (AsgiEndpointPermissions) for pool.asgi's {missing}"


def test_every_row_names_an_operation_that_is_served(schema: dict[str, Any]) -> None:
    operations = schema_operations(schema) | api_operations()
    stale = [row.__name__ for row in rows()
             if (row.method, template_of(row.path, {p for _, p in operations})) not in operations]
    assert not stale, f"rows for operations the server does not serve: {stale}"
    # The routes said to be outside the document really are (else that list is stale).
    assert NOT_IN_SCHEMA.isdisjoint(schema_operations(schema))
