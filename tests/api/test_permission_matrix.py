"""Every endpoint × {anonymous, member, member of another team, pool admin}: the status each gets.

One base case configured by class attributes (STYLE #22): a subclass names the method, the path
(with {lease}, {host}, {gpu}, {quota}, {event} taken from the `world` fixture), a body and the
expected status per role. Every error answer must be the JSON error body with a code.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

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

    def _call(self, role: str, world: Any, api: Any) -> Any:
        user = None if role == "anonymous" else getattr(world, role)
        url = self.path.format(lease=world.lease_id, host=world.host_id, gpu=world.gpu_uuid,
                               quota=world.quota_id, event=world.event_id)
        client = api(user)
        call = getattr(client, self.method)
        response = call(url, self.body, format="json") if self.method != "get" else call(url)
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
