"""Every endpoint × {anonymous, member, member of another team, pool admin}: the status each gets.

One base case configured by class attributes (STYLE #22): a subclass names the method, the path
(with {lease}, {host}, {gpu}, {quota}, {event} taken from the `world` fixture, and whatever its
`keys()` adds), a body and the expected status per role. Every error answer must be the JSON error
body with a code.

The list of rows is checked against what the server really serves (tests/support/api_routes.py:
the URLconf, the OpenAPI document, the ASGI front), as NetBox checks its API test cases against its
views: an endpoint without rows fails `test_every_operation_has_permission_rows`, naming it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any, ClassVar

import pytest
from django.urls import resolve
from django.utils import timezone

from tests.support.api_routes import (
    NOT_IN_SCHEMA,
    api_operations,
    api_routes,
    asgi_routes,
    schema_operations,
    template_of,
)

pytestmark = pytest.mark.django_db

READ = {"anonymous": 401, "member": 200, "other": 200, "admin": 200}
OWN_TEAM = {"anonymous": 401, "member": 200, "other": 404, "admin": 200}
ADMIN_ONLY = {"anonymous": 401, "member": 403, "other": 403, "admin": 200}
PUBLIC = {"anonymous": 200, "member": 200, "other": 200, "admin": 200}


class EndpointPermissions:
    method: ClassVar[str] = "get"
    path: ClassVar[str] = ""
    body: ClassVar[dict[str, Any] | None] = None
    expect: ClassVar[dict[str, int]] = READ

    def keys(self, world: Any) -> dict[str, Any]:
        """More names for the path, for a row that needs a row of its own (a reservation)."""
        return {}

    def payload(self, world: Any) -> dict[str, Any] | None:
        return self.body

    def _call(self, role: str, world: Any, api: Any) -> Any:
        user = None if role == "anonymous" else getattr(world, role)
        url = self.path.format(lease=world.lease_id, host=world.host_id, gpu=world.gpu_uuid,
                               quota=world.quota_id, event=world.event_id, **self.keys(world))
        client = api(user)
        call = getattr(client, self.method)
        response = call(url, self.payload(world), format="json") if self.method != "get" else call(url)
        assert response.status_code == self.expect[role], (role, url, response.content[:300])
        if response.status_code >= 400:
            body = response.json()
            assert body["code"] and body["message"], body
        return response

    def test_an_anonymous_caller_gets_the_expected_status(self, world: Any, api: Any) -> None:
        self._call("anonymous", world, api)

    def test_a_member_of_the_owning_team_gets_the_expected_status(self, world: Any, api: Any) -> None:
        self._call("member", world, api)

    def test_a_member_of_another_team_gets_the_expected_status(self, world: Any, api: Any) -> None:
        self._call("other", world, api)

    def test_a_pool_admin_gets_the_expected_status(self, world: Any, api: Any) -> None:
        self._call("admin", world, api)


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


class TestLeaseList(EndpointPermissions):
    path = "/api/v1/leases/"


class TestLeaseCreateForTheMembersTeam(EndpointPermissions):
    method, path = "post", "/api/v1/leases/"
    body = {"pool": "training", "gpus": 1, "team": "vision"}
    expect = {"anonymous": 401, "member": 201, "other": 403, "admin": 201}


class TestLeaseBatchForTheMembersTeam(EndpointPermissions):
    # The call is the caller's; each item answers for itself (another team's item: its own 403).
    method, path = "post", "/api/v1/leases/batch/"
    body = {"leases": [{"pool": "training", "gpus": 1, "team": "vision"}]}
    expect = {"anonymous": 401, "member": 200, "other": 200, "admin": 200}


class TestLeaseDetail(EndpointPermissions):
    path, expect = "/api/v1/leases/{lease}/", OWN_TEAM


class TestLeaseRenew(EndpointPermissions):
    method, path, body, expect = "post", "/api/v1/leases/{lease}/renew/", {}, OWN_TEAM


class TestLeaseRelease(EndpointPermissions):
    method, path, body, expect = "post", "/api/v1/leases/{lease}/release/", {}, OWN_TEAM


class TestLeaseEvents(EndpointPermissions):
    path, expect = "/api/v1/leases/{lease}/events/", OWN_TEAM


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


class TestLeaseEventStreamThroughDjango(EndpointPermissions):
    """The stream is the ASGI front's (pool.asgi, the rows below); Django, reached without it (a
    WSGI-only server), authenticates and then says it does not serve it."""

    path = "/api/v1/leases/events/"
    expect = {"anonymous": 401, "member": 404, "other": 404, "admin": 404}


class TestLeaseLogsThroughDjango(EndpointPermissions):
    """The ASGI front streams it (the row below); a WSGI-only server streams it from Django. The
    world's lease has no workload: a 409 `no_workload` for those who may see it."""

    path = "/api/v1/leases/{lease}/logs/"
    expect = {"anonymous": 401, "member": 409, "other": 404, "admin": 409}


class TestLeaseExecThroughDjango(EndpointPermissions):
    """A websocket on the ASGI front (the row below); Django makes the same checks, then answers 426.
    The world's lease has no workload: a 409 `no_workload` for those who may see it."""

    path = "/api/v1/leases/{lease}/exec/?command=true"
    expect = {"anonymous": 401, "member": 409, "other": 404, "admin": 409}


class TestLeaseShellKeys(EndpointPermissions):
    path, expect = "/api/v1/leases/{lease}/ssh-keys/", OWN_TEAM


class TestLeaseShellKeyAdd(EndpointPermissions):
    """The world's lease has no binding: a 409 `no_shell` for those who may see it."""

    method, path = "post", "/api/v1/leases/{lease}/ssh-keys/"
    expect = {"anonymous": 401, "member": 409, "other": 404, "admin": 409}

    def payload(self, world: Any) -> dict[str, Any] | None:
        from tests.support.sshd import sample_public_key

        return {"public_key": sample_public_key()}


class TestLeaseShellKeyRemove(EndpointPermissions):
    method, path = "delete", "/api/v1/leases/{lease}/ssh-keys/{key}/"
    expect = {"anonymous": 401, "member": 204, "other": 404, "admin": 204}

    def keys(self, world: Any) -> dict[str, Any]:
        from allocation.models import LeaseShellKey

        row, _ = LeaseShellKey.objects.get_or_create(lease_id=world.lease_id, fingerprint="SHA256:x",
                                                     key_type="ssh-ed25519")
        return {"key": row.pk}


# --- the ASGI front: what pool.asgi answers itself, over the production web server -----------------
@pytest.fixture(scope="module")
def asgi_server(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: Any) -> Iterator[str]:
    from tests.support.processes import web_server

    with django_db_blocker.unblock(), web_server(tmp_path_factory.mktemp("web") / "web.log") as url:
        yield url


class AsgiEndpointPermissions(EndpointPermissions):
    """A row answered by the ASGI front before Django (the long poll, the event stream): called over
    HTTP on gunicorn + uvicorn, so the world's rows are committed (transactional_db)."""

    pytestmark = pytest.mark.slow
    server: str = ""

    @pytest.fixture(autouse=True)
    def _on_the_web_server(self, asgi_server: str, transactional_db: Any) -> None:
        self.server = asgi_server

    def _call(self, role: str, world: Any, api: Any) -> Any:
        import requests

        from tests.support.tokens import api_key

        user = None if role == "anonymous" else getattr(world, role)
        headers = {"Authorization": f"Token {api_key(user)}"} if user is not None else {}
        url = self.path.format(lease=world.lease_id, **self.keys(world))
        response = requests.get(self.server + url, headers=headers, timeout=30)
        assert response.status_code == self.expect[role], (role, url, response.text[:300])
        if response.status_code >= 400:
            body = response.json()
            assert body["code"] and body["message"], body
        return response


class TestLeaseLongPollOnAsgi(AsgiEndpointPermissions):
    path, expect = "/api/v1/leases/{lease}/?wait=0.2", OWN_TEAM


class TestLeaseEventStreamOnAsgi(AsgiEndpointPermissions):
    path = "/api/v1/leases/events/?timeout=0.2"  # every caller: each sees its own teams' leases


class TestLeaseEventStreamOfOneTeamOnAsgi(AsgiEndpointPermissions):
    path = "/api/v1/leases/events/?team=vision&timeout=0.2"
    expect = {"anonymous": 401, "member": 200, "other": 403, "admin": 200}


class TestLeaseLogsOnAsgi(AsgiEndpointPermissions):
    path = "/api/v1/leases/{lease}/logs/?tail=5"
    expect = {"anonymous": 401, "member": 409, "other": 404, "admin": 409}


class TestLeaseExecOnAsgi(AsgiEndpointPermissions):
    """The exec websocket: a refusal comes before the upgrade, as the API's error answer."""

    path = "/api/v1/leases/{lease}/exec/?command=true"
    expect = {"anonymous": 401, "member": 409, "other": 404, "admin": 409}

    def _call(self, role: str, world: Any, api: Any) -> Any:
        import json

        import websocket

        from tests.support.tokens import api_key

        user = None if role == "anonymous" else getattr(world, role)
        headers = [f"Authorization: Token {api_key(user)}"] if user is not None else []
        url = self.server.replace("http://", "ws://") + self.path.format(lease=world.lease_id)
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            websocket.create_connection(url, header=headers, timeout=30)
        assert refused.value.status_code == self.expect[role], (role, url, refused.value.resp_body)
        body = json.loads(refused.value.resp_body or b"{}")
        assert body["code"] and body["message"], body


# --- the list of rows is the server's list of operations ----------------------------------------
def _rows() -> list[type[EndpointPermissions]]:
    found, todo = [], list(EndpointPermissions.__subclasses__())
    while todo:
        row = todo.pop()
        todo.extend(row.__subclasses__())
        if row.path:
            found.append(row)
    return found


def _covered(templates: set[str]) -> dict[tuple[str, str], list[str]]:
    covered: dict[tuple[str, str], list[str]] = {}
    for row in _rows():
        template = template_of(row.path, templates)
        if template is not None:
            covered.setdefault((row.method, template), []).append(row.__name__)
    return covered


def test_every_operation_has_permission_rows(schema: dict[str, Any]) -> None:
    operations = schema_operations(schema) | api_operations()
    covered = _covered({path for _, path in operations})
    missing = sorted(f"{method.upper()} {path}" for method, path in operations - covered.keys())
    assert not missing, f"no permission rows for {missing}: add a subclass of EndpointPermissions " \
                        "(tests/api/test_permission_matrix.py) with what each role gets"


def test_every_api_route_has_permission_rows() -> None:
    """Route by route as Django resolves them (catches a view left out of the OpenAPI document)."""
    routed = {resolve(row.path.split("?")[0].format(lease="0", host="0", gpu="0", quota="0", event="0",
                                                   reservation="0", subscription="0", delivery="0", key="0")).route
              for row in _rows()}
    missing = sorted(r.template for r in api_routes() if r.route not in routed)
    assert not missing, f"no permission rows for the routes {missing}"


def test_every_path_of_the_asgi_front_has_permission_rows() -> None:
    on_asgi = [row.path.split("?")[0].format(lease="0") for row in _rows()
               if issubclass(row, AsgiEndpointPermissions)]
    missing = sorted(name for name, pattern in asgi_routes().items()
                     if not any(pattern.match(path) for path in on_asgi))
    assert not missing, f"no permission rows (AsgiEndpointPermissions) for pool.asgi's {missing}"


def test_every_row_names_an_operation_that_is_served(schema: dict[str, Any]) -> None:
    operations = schema_operations(schema) | api_operations()
    stale = [row.__name__ for row in _rows()
             if (row.method, template_of(row.path, {p for _, p in operations})) not in operations]
    assert not stale, f"rows for operations the server does not serve: {stale}"
    # The routes said to be outside the document really are (else that list is stale).
    assert NOT_IN_SCHEMA.isdisjoint(schema_operations(schema))
