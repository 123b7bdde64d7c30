"""The base case of the API permission matrix (tests/api/test_permission_matrix.py: the REST
resources and the coverage checks; tests/api/test_permission_matrix_leases.py: the leases, with
their streams on the ASGI front). One base case configured by class attributes (STYLE #22): a
subclass names the method, the path (with {lease}, {host}, {gpu}, {quota}, {event} taken from the
`world` fixture, and whatever its `keys()` adds), a body and the expected status per role. Every
error answer must be the JSON error body with a code. Not a test module itself: both import it."""

from __future__ import annotations

from typing import Any, ClassVar

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


def rows() -> list[type[EndpointPermissions]]:
    """Every row defined so far (a module's rows count once it is imported)."""
    found, todo = [], list(EndpointPermissions.__subclasses__())
    while todo:
        row = todo.pop()
        todo.extend(row.__subclasses__())
        if row.path:
            found.append(row)
    return found
