"""`gpupool login --sso` as the CLI does it: plain HTTP to gpupool (requests), the device
authorization grant through a real OpenID Provider (tests/support/oidc.py), the person's half in
a real browser at the provider's verification page. The token it ends with works on the API, with
the teams the groups claim maps to."""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests

from tests.frontend.browser import needs_chromium
from tests.frontend.test_sso_browser import CONFIG, sign_in_at_provider

pytestmark = [pytest.mark.browser, needs_chromium]

FLEET = """
sources:
  - {name: sim, kind: simulated, pool: training, hosts: 1, gpus_per_host: 2, model: "NVIDIA H100 80GB HBM3",
     memory_mb: 81559}
"""


@pytest.fixture
def sso(oidc_provider: Any, settings: Any, apply_yaml: Any) -> Any:
    apply_yaml(CONFIG + FLEET)
    settings.OIDC = oidc_provider.settings()
    oidc_provider.set_groups("alice", ["ml-vision"])
    return oidc_provider


def poll(base: str, device_code: str) -> requests.Response:
    return requests.post(f"{base}/api/v1/auth/device/token/", json={"device_code": device_code}, timeout=30)


def test_the_device_flow_yields_a_working_api_token_of_the_teams_member(
        live_server: Any, sso: Any, page: Any) -> None:
    base = live_server.url
    started = requests.post(f"{base}/api/v1/auth/device/", timeout=30)
    assert started.status_code == 200, started.text
    flow = started.json()
    assert set(flow) >= {"device_code", "user_code", "verification_uri", "expires_in", "interval"}
    assert flow["verification_uri"].startswith(sso.issuer)  # the person signs in at the provider
    assert re.fullmatch(r"[A-Z]{4}-[A-Z]{4}", flow["user_code"])

    waiting = poll(base, flow["device_code"])
    assert waiting.status_code == 400 and waiting.json()["code"] == "authorization_pending"

    # The person: the provider's page, the code confirmed, the provider's login form.
    page.goto(flow["verification_uri_complete"])
    assert flow["user_code"] in page.locator("code").inner_text()
    page.get_by_role("button", name="Continue").click()
    sign_in_at_provider(page, "alice")
    page.wait_for_selector("text=You may close this page.")

    done = poll(base, flow["device_code"])
    assert done.status_code == 200, done.text
    body = done.json()
    assert (body["username"], body["teams"], body["pool_admin"]) == ("alice", ["ops", "vision"], False)

    headers = {"Authorization": f"Token {body['token']}"}
    teams = requests.get(f"{base}/api/v1/teams/", headers=headers, timeout=30)
    assert {t["name"] for t in teams.json()["results"]} >= {"vision", "ops"}
    lease = requests.post(f"{base}/api/v1/leases/", headers=headers, timeout=30,
                          json={"pool": "training", "gpus": 1, "team": "vision", "ttl_seconds": 600})
    assert lease.status_code == 201, lease.text  # a write token of a member of vision
    assert requests.get(f"{base}/api/v1/teams/nlp/", headers=headers, timeout=30).status_code == 404

    again = poll(base, flow["device_code"])  # the provider consumed the code: one token per login
    assert again.status_code == 400 and again.json()["code"] == "invalid_grant"


def test_a_device_code_gpupool_did_not_issue_is_refused(live_server: Any, sso: Any) -> None:
    answer = poll(live_server.url, "made-up")
    assert answer.status_code == 400 and answer.json()["code"] == "invalid_grant"


def test_the_device_endpoints_say_when_single_sign_on_is_off(live_server: Any, settings: Any) -> None:
    settings.OIDC = {**settings.OIDC, "ISSUER": None}
    answer = requests.post(f"{live_server.url}/api/v1/auth/device/", timeout=30)
    assert answer.status_code == 404 and answer.json()["code"] == "sso_disabled"
