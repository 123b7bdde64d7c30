"""The API refuses what it does not understand, on every list: a query parameter no operation
documents (a lookup no filter declares, `utilization_pct__lt=10`, included) is a 400
`unknown_parameter`, and a filter naming a pool, team, user, host, source or priority class that does
not exist is a 400 `unknown_<noun>` naming the parameter and the value, where both used to answer
200 (every GPU, or an empty page that reads as an idle pool).

The routes come from the URLconf (tests.support.api_routes) and are asked through the production
web server, whose ASGI front answers the long poll and the event stream itself; the names come from
each list's filterset, so a new endpoint or filter is covered without touching this file."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.support.api_routes import NOT_IN_SCHEMA, api_routes
from tests.support.processes import web_server

pytestmark = [pytest.mark.slow]

JUNK = "zz_junk"


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: Any) -> Iterator[str]:
    with django_db_blocker.unblock(), web_server(tmp_path_factory.mktemp("web") / "web.log",
                                                 GPUPOOL_AUTOSCHEDULE="0") as url:
        yield url


@pytest.fixture
def admin(transactional_db: Any, web: str, world: Any) -> requests.Session:
    from tests.support.tokens import api_key

    session = requests.Session()
    session.headers["Authorization"] = f"Token {api_key(world.admin)}"
    return session


def _get_routes() -> list[str]:
    return sorted(r.template for r in api_routes() if "get" in r.methods and ("get", r.template) not in NOT_IN_SCHEMA)


def _lists() -> list[tuple[str, Any]]:
    """(path, filterset class) of every list the URLconf routes: a viewset's `list` action."""
    from django.urls import resolve

    found = []
    for template in _get_routes():
        if "{" in template:
            continue
        callback: Any = resolve(template).func
        if getattr(callback, "actions", {}).get("get") == "list":
            found.append((template, getattr(callback.cls, "filterset_class", None)))
    return found


def test_every_get_route_refuses_a_junk_parameter_through_the_web_server(admin: requests.Session, web: str,
                                                                        fill: Any) -> None:
    routes = _get_routes()
    assert len(routes) >= 20, routes
    # The two answered by the ASGI front before Django (pool.asgi): the long poll needs `wait`.
    asked = [f"{fill(t)}?{JUNK}=1" for t in routes] + [f"{fill('/api/v1/leases/{id}/')}?wait=0&{JUNK}=1"]
    for url in asked:
        response = admin.get(web + url, timeout=30)
        assert response.status_code == 400, (url, response.status_code, response.text[:300])
        body = response.json()
        assert body["code"] == "unknown_parameter" and JUNK in body["message"], (url, body)


def test_a_lookup_no_filter_declares_is_refused_not_ignored(admin: requests.Session, web: str) -> None:
    response = admin.get(f"{web}/api/v1/gpus/?utilization_pct__lt=10", timeout=30)
    assert response.status_code == 400
    assert response.json()["details"] == {"utilization_pct__lt": ["unknown parameter"]}
    assert "pool" in response.json()["message"]  # it says what the list takes


KNOWN = {"pool": "training", "team": "vision", "user": "alice", "source": "demo", "priority_class": "default"}


def test_every_name_filter_of_every_list_refuses_a_name_that_names_nothing(admin: requests.Session, web: str,
                                                                          world: Any) -> None:
    from core.api.filtersets import NameFilter
    from inventory.models import Host

    known = {**KNOWN, "host": Host.objects.get(pk=world.host_id).name}
    checked = set()
    for path, filterset in _lists():
        for param, declared in (filterset.base_filters.items() if filterset else ()):
            if not isinstance(declared, NameFilter):
                continue
            refused = admin.get(f"{web}{path}?{param}=nope-nothing", timeout=30)
            assert refused.status_code == 400, (path, param, refused.text[:300])
            body = refused.json()
            assert body["code"] == f"unknown_{declared.noun}", (path, param, body)
            assert body["details"] == {param: [f"no {declared.noun.replace('_', ' ')} is named 'nope-nothing'"]}
            assert "nope-nothing" in body["message"]
            accepted = admin.get(f"{web}{path}?{param}={known[declared.noun]}", timeout=30)
            assert accepted.status_code == 200, (path, param, accepted.text[:300])
            checked.add((path, param))
    assert {("/api/v1/gpus/", "pool"), ("/api/v1/leases/", "user"), ("/api/v1/hosts/", "source"),
            ("/api/v1/leases/", "priority_class"), ("/api/v1/quotas/", "team")} <= checked
    assert len(checked) >= 15


def test_several_unknown_names_are_all_named_in_one_answer(admin: requests.Session, web: str) -> None:
    response = admin.get(f"{web}/api/v1/leases/?pool=nope&team=ghosts&state=pending", timeout=30)
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "unknown_value" and set(body["details"]) == {"pool", "team"}
    one = admin.get(f"{web}/api/v1/leases/?team=ghosts", timeout=30).json()
    assert one["code"] == "unknown_team"


def test_choice_filters_refuse_values_outside_their_choices_and_free_text_stays_free(
        admin: requests.Session, web: str) -> None:
    for url, param in (("/api/v1/gpus/?state=sleeping", "state"), ("/api/v1/hosts/?kind=mainframe", "kind"),
                       ("/api/v1/notifications/deliveries/?event=lease.exploded", "event"),
                       ("/api/v1/notifications/deliveries/?kind=pigeon", "kind"),
                       ("/api/v1/reservations/?state=someday", "state")):
        response = admin.get(web + url, timeout=30)
        assert response.status_code == 400 and response.json()["code"] == "invalid", (url, response.text[:300])
        assert param in response.json()["details"], url
    # A substring of a model name, an audit actor, a delivery's team (kept as it was): no match is
    # an empty page, not an error.
    for url in ("/api/v1/gpus/?model=TPU", "/api/v1/audit-events/?actor=nobody",
                "/api/v1/notifications/deliveries/?team=gone-team"):
        response = admin.get(web + url, timeout=30)
        assert response.status_code == 200 and response.json()["results"] == [], url


def test_the_schema_documents_the_refusals_on_every_list(schema: dict[str, Any]) -> None:
    for path, filterset in _lists():
        described = schema["paths"][path]["get"]["responses"]["400"]["description"]
        assert "unknown_parameter" in described, path
        names = {f"unknown_{f.noun}" for f in (filterset.base_filters.values() if filterset else ())
                 if getattr(f, "noun", None)}
        assert all(code in described for code in names), (path, described)
    pool = next(p for p in schema["paths"]["/api/v1/gpus/"]["get"]["parameters"] if p["name"] == "pool")
    assert "unknown_pool" in pool["description"]
