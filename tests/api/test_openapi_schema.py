"""The OpenAPI document: generated without warnings, valid OpenAPI 3, lists every endpoint of the
contract, documents every field, and is served with the Swagger UI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from openapi_spec_validator import validate

from tests.support.api_routes import NOT_IN_SCHEMA, api_operations, schema_operations

pytestmark = pytest.mark.django_db

ENDPOINTS = {
    ("/api/v1/pools/", "get"), ("/api/v1/pools/{name}/", "get"),
    ("/api/v1/hosts/", "get"), ("/api/v1/hosts/{id}/", "get"),
    ("/api/v1/hosts/{id}/cordon/", "post"), ("/api/v1/hosts/{id}/drain/", "post"),
    ("/api/v1/hosts/{id}/uncordon/", "post"), ("/api/v1/hosts/{id}/forget-workloads/", "post"),
    ("/api/v1/gpus/", "get"), ("/api/v1/gpus/{uuid}/", "get"), ("/api/v1/gpus/{uuid}/move/", "post"),
    ("/api/v1/teams/", "get"), ("/api/v1/teams/{name}/", "get"),
    ("/api/v1/quotas/", "get"), ("/api/v1/quotas/{id}/", "get"), ("/api/v1/quotas/{id}/", "patch"),
    ("/api/v1/priority-classes/", "get"),
    ("/api/v1/leases/", "get"), ("/api/v1/leases/", "post"), ("/api/v1/leases/{id}/", "get"),
    ("/api/v1/leases/{id}/renew/", "post"), ("/api/v1/leases/{id}/release/", "post"),
    ("/api/v1/leases/{id}/events/", "get"), ("/api/v1/leases/{id}/logs/", "get"),
    ("/api/v1/audit-events/", "get"), ("/api/v1/audit-events/{id}/", "get"),
    ("/api/v1/pools/{name}/move/", "post"), ("/api/v1/hosts/{id}/move/", "post"),
    ("/api/v1/priority-classes/{name}/", "get"), ("/api/v1/leases/events/", "get"),
    ("/api/v1/reservations/", "get"), ("/api/v1/reservations/", "post"), ("/api/v1/reservations/{id}/", "get"),
    ("/api/v1/reservations/{id}/cancel/", "post"),
    ("/api/v1/history/pools/{name}/", "get"), ("/api/v1/history/teams/{name}/", "get"),
    ("/api/v1/history/gpus/{uuid}/", "get"), ("/api/v1/usage/", "get"),
    ("/api/v1/notifications/subscriptions/", "get"), ("/api/v1/notifications/subscriptions/", "post"),
    ("/api/v1/notifications/subscriptions/{id}/", "get"), ("/api/v1/notifications/subscriptions/{id}/", "delete"),
    ("/api/v1/notifications/deliveries/", "get"), ("/api/v1/notifications/deliveries/{id}/", "get"),
    ("/api/v1/auth/device/", "post"), ("/api/v1/auth/device/token/", "post"),
    ("/api/v1/leases/{id}/ssh-keys/", "get"), ("/api/v1/leases/{id}/ssh-keys/", "post"),
    ("/api/v1/leases/{id}/ssh-keys/{key}/", "delete"), ("/api/v1/leases/{id}/exec/", "get"),
}


def test_the_schema_generates_without_warnings_and_passes_spectaculars_validation(tmp_path: Path) -> None:
    # --fail-on-warn turns every "could not derive type" or enum collision into a failure.
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))


def test_the_served_schema_is_valid_openapi_3(schema: dict[str, Any]) -> None:
    assert schema["openapi"].startswith("3.")
    validate(schema)


def test_the_schema_lists_every_endpoint_of_the_contract(schema: dict[str, Any]) -> None:
    listed = {(path, method) for path, ops in schema["paths"].items() for method in ops}
    assert listed >= ENDPOINTS, sorted(ENDPOINTS - listed)


def test_the_schema_lists_every_operation_the_server_routes_and_no_other(schema: dict[str, Any]) -> None:
    """Derived from the URLconf (tests/support/api_routes.py), not kept by hand: a view the
    document leaves out, or one it lists that nothing serves, fails here naming it."""
    routed = {(path, method) for method, path in api_operations() - NOT_IN_SCHEMA}
    listed = {(path, method) for method, path in schema_operations(schema)}
    assert sorted(routed - listed) == [], "served but not in the OpenAPI document"
    assert sorted(listed - routed) == [], "in the OpenAPI document but not served"
    assert routed >= ENDPOINTS  # the contract's endpoints are all still served


def test_every_field_of_every_component_has_a_description(schema: dict[str, Any]) -> None:
    missing = [f"{name}.{field}" for name, component in schema["components"]["schemas"].items()
               for field, prop in component.get("properties", {}).items()
               if not (prop.get("description") or "$ref" in prop or "allOf" in prop)]
    assert not missing, missing


def test_lease_reason_queue_position_and_estimated_start_are_documented(schema: dict[str, Any]) -> None:
    lease = schema["components"]["schemas"]["Lease"]["properties"]
    for name in ("reason", "queue_position", "estimated_start"):
        assert len(lease[name]["description"]) > 20, name


def test_hosts_carry_their_discovery_backoff(schema: dict[str, Any]) -> None:
    host = schema["components"]["schemas"]["Host"]["properties"]
    assert host["probe_failures"]["type"] == "integer"
    assert (host["next_probe_at"]["format"], host["next_probe_at"].get("nullable")) == ("date-time", True)
    assert "backoff" in host["next_probe_at"]["description"]


def test_error_answers_are_documented_with_the_error_body(schema: dict[str, Any]) -> None:
    create = schema["paths"]["/api/v1/leases/"]["post"]["responses"]
    for code in ("400", "401", "409", "413", "415", "429"):
        ref = create[code]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/Error"), (code, ref)


def test_the_swagger_ui_is_served(client: Any) -> None:
    response = client.get("/api/docs/")
    assert response.status_code == 200 and b"swagger" in response.content.lower()


def test_the_log_endpoint_is_documented_as_a_text_stream_with_its_parameters_and_errors(
        schema: dict[str, Any]) -> None:
    operation = schema["paths"]["/api/v1/leases/{id}/logs/"]["get"]
    assert operation["responses"]["200"]["content"] == {"text/plain": {"schema": {"type": "string"}}}
    assert {p["name"] for p in operation["parameters"] if p["in"] == "query"} == {"follow", "tail"}
    for code in ("400", "401", "404", "409", "410", "429", "502", "503"):
        ref = operation["responses"][code]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/Error"), code
    lease = schema["components"]["schemas"]["Lease"]["properties"]
    assert lease["exit_code"]["nullable"] and "exit" in lease["exit_code"]["description"]
