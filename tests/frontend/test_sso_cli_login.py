"""`gpupool login --sso` as a process of its own, through a real OpenID Provider
(tests/support/oidc.py) with the person's half in a real browser: the CLI prints the provider's
page and the code, polls at the interval it was given, and saves the token it ends with as a
context that works. With single sign-on off, it says so and how else to log in."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli.workloads.conftest import Gpupool, Output
from tests.frontend.browser import needs_chromium
from tests.frontend.test_sso_browser import sign_in_at_provider
from tests.frontend.test_sso_device_login import sso  # noqa: F401  (the fixture: the provider, alice in ml-vision)


def _gpupool(base: str, config: Path) -> Gpupool:
    return Gpupool(url=base, token="", config=config)


def _env(cli: Gpupool) -> dict[str, str]:
    env = cli.env()
    for name in ("GPUPOOL_URL", "GPUPOOL_TOKEN", "GPUPOOL_CONTEXT"):
        env.pop(name, None)  # only what the login saves
    return env


@pytest.mark.browser
@needs_chromium
def test_login_sso_signs_in_at_the_provider_and_saves_a_working_context(
        live_server: Any, sso: Any, page: Any, tmp_path: Path) -> None:  # noqa: F811
    cli = _gpupool(live_server.url, tmp_path / "config.json")
    proc = subprocess.Popen([sys.executable, "-m", "gpupool_cli", "login", "--sso", "--url", live_server.url,
                             "--context", "work"], env=_env(cli), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    err = Output(proc.stderr)
    err.wait_for("waiting for the sign-in")
    said = re.search(r"open (\S+) and enter the code ([A-Z]{4}-[A-Z]{4})", err.text)
    complete = re.search(r"\(or open (\S+), which carries the code\)", err.text)
    assert said and complete, err.text
    assert said.group(1).startswith(sso.issuer)

    page.goto(complete.group(1))  # the person, on any device
    assert said.group(2) in page.locator("code").inner_text()
    page.get_by_role("button", name="Continue").click()
    sign_in_at_provider(page, "alice")
    page.wait_for_selector("text=You may close this page.")
    signed_in = time.monotonic()

    assert proc.wait(timeout=60) == 0, err.text
    out = proc.stdout.read()
    assert out.startswith(f"logged in to {live_server.url} as alice (teams: ops, vision; the token expires "), out
    print(f"login --sso: token {time.monotonic() - signed_in:.1f} s after the sign-in")
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["current-context"] == "work" and saved["contexts"]["work"]["url"] == live_server.url

    listed = subprocess.run([sys.executable, "-m", "gpupool_cli", "pools", "-o", "json"], env=_env(cli),
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and [p["name"] for p in json.loads(listed.stdout)] == ["training"], listed.stderr


@pytest.mark.django_db(transaction=True)
def test_login_sso_where_single_sign_on_is_off_says_how_else(live_server: Any, settings: Any,
                                                             tmp_path: Path) -> None:
    settings.OIDC = {**settings.OIDC, "ISSUER": None}
    cli = _gpupool(live_server.url, tmp_path / "config.json")
    done = subprocess.run([sys.executable, "-m", "gpupool_cli", "login", "--sso", "--url", live_server.url],
                          env=_env(cli), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: single sign-on is not set up on {live_server.url}: log in with a token")
    assert done.stderr.rstrip().endswith("(sso_disabled)") and not (tmp_path / "config.json").exists()
