"""Unknown fields in any write body and unknown query parameters on any endpoint are a 400 naming
them (`unknown_field`, `unknown_parameter`), and change nothing. The endpoints come from the served
OpenAPI document, so a new endpoint is covered without touching this file; what a request may carry
is what that document says, and everything it documents is accepted."""

from __future__ import annotations

import re
from typing import Any

import pytest

pytestmark = pytest.mark.django_db

STRAY = "zz_not_a_field"


def _operations(schema: dict[str, Any], methods: tuple[str, ...]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, ops in sorted(schema["paths"].items()) for method, op in ops.items()
            if method in methods and path.startswith("/api/v1/") and "{" not in re.sub(r"\{(uuid|id|name)\}", "", path)]


def _minimal_body(schema: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
    """Valid-looking values for the required fields, so only the stray field can be wrong."""
    ref = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
    component = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else {}
    samples = {"pool": "inference", "gpus": 1, "team": "vision", "hosts": [1], "start": "2030-01-01T00:00:00Z",
               "end": "2030-01-01T01:00:00Z"}
    return {name: samples.get(name, "x") for name in component.get("required", [])}


def test_every_write_body_refuses_an_unknown_field_naming_it(world: Any, api: Any, schema: dict[str, Any],
                                                             fill: Any, database_rows: Any) -> None:
    writes = _operations(schema, ("post", "patch", "put"))
    assert len(writes) >= 12, writes
    admin = api(world.admin)
    before = database_rows()
    for path, method, op in writes:
        body = {**_minimal_body(schema, op), STRAY: True}
        response = getattr(admin, method)(fill(path), body, format="json")
        assert response.status_code == 400, (path, method, response.content[:300])
        answer = response.json()
        assert answer["code"] == "unknown_field" and list(answer["details"]) == [STRAY], (path, answer)
        assert STRAY in answer["message"]
    assert database_rows() == before


def test_the_preview_that_moved_a_leased_gpu_is_now_refused(world: Any, api: Any, database_rows: Any) -> None:
    from allocation.engine import run_pass
    from inventory.models import Gpu

    run_pass()
    held = api(world.member).get(f"/api/v1/leases/{world.lease_id}/").json()["gpus"][0]
    before = database_rows()
    response = api(world.admin).post(f"/api/v1/gpus/{held}/move/", {"pool": "inference", "preview": True},
                                     format="json")
    assert response.status_code == 400 and response.json()["details"] == {"preview": ["unknown field"]}
    assert database_rows() == before and Gpu.objects.get(uuid=held).pool.name == "training"


def test_nested_and_form_encoded_unknown_fields_are_named_too(world: Any, api: Any, database_rows: Any) -> None:
    from allocation.models import Lease

    client = api(world.member)
    leases = Lease.objects.count()
    nested = client.post("/api/v1/leases/", {"pool": "training", "gpus": 1, "binding": {
        "kind": "process", "command": ["true"], "cmd": "x"}}, format="json")
    assert nested.status_code == 400 and nested.json()["details"] == {"binding.cmd": ["unknown field"]}
    form = client.post("/api/v1/leases/", "pool=training&gpus=1&gpu=2",
                       content_type="application/x-www-form-urlencoded")
    assert form.status_code == 400 and form.json()["details"] == {"gpu": ["unknown field"]}
    # Free-form values (a Pod manifest, an environment) are not walked into.
    free = client.post("/api/v1/leases/", {"pool": "training", "gpus": 1, "binding": {
        "kind": "process", "command": ["true"], "env": {"ANYTHING": "1"}}}, format="json")
    assert free.status_code == 201, free.content[:300]
    assert Lease.objects.count() == leases + 1


def test_a_body_on_an_action_that_takes_none_is_refused(world: Any, api: Any, database_rows: Any) -> None:
    admin = api(world.admin)
    before = database_rows()
    response = admin.post(f"/api/v1/hosts/{world.host_id}/drain/", {"force": True}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "unknown_field"
    assert "takes nothing" in response.json()["message"]
    assert database_rows() == before
    assert admin.post(f"/api/v1/hosts/{world.host_id}/cordon/", {}, format="json").status_code == 200


def test_every_endpoint_refuses_an_unknown_query_parameter(world: Any, api: Any, schema: dict[str, Any],
                                                           fill: Any, database_rows: Any) -> None:
    operations = _operations(schema, ("get", "post", "patch"))
    admin = api(world.admin)
    before = database_rows()
    for path, method, op in operations:
        url = f"{fill(path)}?{STRAY}=1"
        response = admin.get(url) if method == "get" else getattr(admin, method)(
            url, _minimal_body(schema, op), format="json")
        assert response.status_code == 400, (path, method, response.content[:300])
        answer = response.json()
        assert answer["code"] == "unknown_parameter" and answer["details"] == {STRAY: ["unknown parameter"]}, answer
    assert database_rows() == before


def test_every_documented_query_parameter_is_accepted(world: Any, api: Any, schema: dict[str, Any],
                                                      fill: Any) -> None:
    admin = api(world.admin)
    checked = 0
    for path, _, op in _operations(schema, ("get",)):
        for param in op.get("parameters", []):
            if param["in"] != "query" or param["name"] == "wait":  # wait: a long poll, served by pool.asgi
                continue
            response = admin.get(f"{fill(path)}?{param['name']}=1&format=json")
            assert response.status_code == 404 or response.json().get("code") != "unknown_parameter", (
                path, param["name"], response.content[:300])
            checked += 1
    assert checked >= 40


def test_paging_and_format_are_accepted_where_documented(world: Any, api: Any) -> None:
    client = api(world.member)
    assert client.get("/api/v1/gpus/?limit=5&offset=5&format=json&pool=training&state=free").status_code == 200
    assert client.get(f"/api/v1/leases/{world.lease_id}/?state=pending").status_code == 200
    assert client.post(f"/api/v1/leases/{world.lease_id}/renew/?keep=false", {}, format="json").status_code == 200
    # A list without paging documents no limit, so it takes none.
    refused = client.get("/api/v1/priority-classes/?limit=5")
    assert refused.status_code == 400 and refused.json()["code"] == "unknown_parameter"


def test_what_is_accepted_is_exactly_what_the_schema_documents(schema: dict[str, Any], fill: Any) -> None:
    """The check reads the filterset itself rather than through drf-spectacular's django-filter
    extension (which imports GDAL): the two must still agree, operation by operation."""
    from django.urls import resolve

    from core.api.strict import derive

    components = schema["components"]["schemas"]
    for path, method, op in _operations(schema, ("get", "post", "patch", "put")):
        url = fill(path)
        wanted = derive(resolve(url).func, method.upper(), url)
        documented = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
        assert wanted.query - {"format"} == documented, (path, method)
        ref = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
        if method != "get":
            fields = set(components[ref.rsplit("/", 1)[-1]]["properties"]) if ref else set()
            assert wanted.body is not None and set(wanted.body.fields) == fields, (path, method)
