"""The API permission matrix (tests/api/test_permission_matrix.py, base case in
tests/api/permission_rows.py) for the leases: the REST endpoints, the streams and the exec as
Django answers them, the users' ssh keys, and what the ASGI front (pool.asgi) answers itself over
the production web server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.permission_rows import OWN_TEAM, EndpointPermissions

pytestmark = pytest.mark.django_db


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
