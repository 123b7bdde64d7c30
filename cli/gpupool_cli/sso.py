"""`gpupool login --sso`: single sign-on by the OAuth 2.0 device authorization grant (RFC 8628),
with gpupool as the OAuth client (docs/sso.md, "The CLI's device login"): the CLI talks only to
gpupool, holds no provider settings and no client secret.

1. `POST auth/device/` → a `user_code` and the provider's `verification_uri` (and, when the
   provider gives one, `verification_uri_complete`, which carries the code);
2. the person opens that page, on this machine or any other, and signs in at the provider;
3. meanwhile `POST auth/device/token/ {device_code}` every `interval` seconds: 400
   `authorization_pending` (again), `slow_down` (again, 5 s slower), 200 with the API token.

Failures that a later poll may cure (the server restarting, a proxy's 502/503/504, the provider not
answering: 503 `sso_unavailable`) are polled through until the code expires. The poll is never
repeated on a lost answer (the provider consumes the code at the first success), only at the next
interval."""

from __future__ import annotations

import os
import sys
import time
import webbrowser
from collections.abc import Callable
from typing import Any

from gpupool_cli.client import Client
from gpupool_cli.config import Config
from gpupool_cli.errors import EXIT_NOT_FOUND, ApiError, CliError

SLOW_DOWN_S = 5  # RFC 8628 §3.5: each slow_down adds 5 s to the interval
DEFAULT_INTERVAL_S = 5
PENDING = "authorization_pending"


def _refused(exc: ApiError, url: str) -> CliError:
    """The device endpoints' final answers, worded for the person at the terminal."""
    messages = {
        "sso_disabled": f"single sign-on is not set up on {url}: log in with a token instead "
                        "(echo $TOKEN | gpupool login --url URL --with-token)",
        "expired_token": "the code expired before the sign-in was finished: run gpupool login --sso again",
        "access_denied": "the sign-in was refused at the provider",
        "invalid_grant": "the server no longer accepts this sign-in (a used or foreign code): run gpupool "
                         "login --sso again",
    }
    error = CliError(messages.get(exc.code, exc.message), code=exc.code, status=exc.status)
    if exc.code in ("access_denied", "sso_refused"):
        error.exit_code = EXIT_NOT_FOUND  # not allowed: the help table's 3
    return error


def can_open_browser() -> bool:
    """A graphical browser is likely here: a terminal, and a display on Linux (without one,
    webbrowser falls back to text browsers that would take the terminal over)."""
    if not sys.stderr.isatty() or os.environ.get("GPUPOOL_NO_BROWSER"):
        return False
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def device_login(url: str, *, say: Callable[[str], None], open_browser: bool,
                 sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Run the device flow against `url`; returns the token answer (`token`, `username`, `teams`,
    `pool_admin`, `expires_at`). Raises CliError with the server's reason when it ends otherwise."""
    client = Client(Config(url=url, token=""))  # anonymous: there is no token yet
    try:
        flow: dict[str, Any] = client.request("POST", "auth/device/", json={})
    except ApiError as exc:
        raise _refused(exc, url) from exc
    say(f"To sign in, open {flow['verification_uri']} and enter the code {flow['user_code']}")
    complete = flow.get("verification_uri_complete")
    if complete:
        say(f"(or open {complete}, which carries the code)")
        if open_browser and webbrowser.open(complete):
            say("opened it in your browser")
    say("waiting for the sign-in to finish (Ctrl-C gives up)…")
    return _poll(client, url, flow, sleep)


def _poll(client: Client, url: str, flow: dict[str, Any], sleep: Callable[[float], None]) -> dict[str, Any]:
    interval = float(flow.get("interval") or DEFAULT_INTERVAL_S)
    deadline = time.monotonic() + float(flow.get("expires_in") or 600)
    while time.monotonic() < deadline:
        sleep(interval)
        try:
            done: dict[str, Any] = client.request("POST", "auth/device/token/",
                                                  json={"device_code": flow["device_code"]})
            return done
        except ApiError as exc:
            if exc.code == "slow_down" or exc.status == 429:
                interval += SLOW_DOWN_S
            elif exc.code != PENDING and not (exc.transient or exc.code == "sso_unavailable"):
                raise _refused(exc, url) from exc
        except CliError as exc:
            if not exc.transient:
                raise
    raise CliError("the code expired before the sign-in was finished: run gpupool login --sso again",
                   code="expired_token")
