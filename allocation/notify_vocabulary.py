"""The words of notifications, in plain Python (the configuration parser is Django-free): event
names, target kinds, their defaults, and the checks a target spec must pass wherever it comes from
(the YAML file, a user's subscription through the API)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

GRANTED = "lease.granted"
EXPIRING = "lease.expiring"
PREEMPTED = "lease.preempted"
LOST = "lease.lost"
BUDGET = "budget.warning"
IDLE = "lease.idle"
EVENTS = (GRANTED, EXPIRING, PREEMPTED, LOST, BUDGET, IDLE)

WEBHOOK = "webhook"
EMAIL = "email"
KINDS = (WEBHOOK, EMAIL)

# A lease granted within this many seconds of its request notifies nobody: the user is still
# looking at the terminal. Per target: `granted_after_s`.
DEFAULT_GRANTED_AFTER_S = 60.0
# `lease.expiring` this long before `expires_at`. Per target: `expiring_before_s`.
DEFAULT_EXPIRING_BEFORE_S = 600.0

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def url_problem(url: Any) -> str | None:
    """Why `url` cannot be a webhook's address (http or https, a host, no credentials); None if it can."""
    if not isinstance(url, str) or not url:
        return f"url must be an http(s) URL, got {url!r}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"url must be an http(s) URL with a host, got {url!r}"
    if parts.username or parts.password:
        return "url must not carry credentials (sign with `secret` instead)"
    if len(url) > 2000:
        return "url is longer than 2000 characters"
    return None


def recipients(value: Any) -> tuple[list[str], str | None]:
    """`to:` as a list of addresses (one string or a list of them), and the problem if any."""
    addresses = [value] if isinstance(value, str) else value
    if not isinstance(addresses, list) or not addresses:
        return [], f"to must be an e-mail address or a list of them, got {value!r}"
    bad = [a for a in addresses if not isinstance(a, str) or not _EMAIL.match(a)]
    if bad:
        return [], f"to: not an e-mail address: {', '.join(repr(b) for b in bad)}"
    return list(addresses), None


def events_problem(events: Any) -> str | None:
    if not isinstance(events, list) or not events:
        return f"events must be a non-empty list of {', '.join(EVENTS)}"
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        return f"unknown event(s) {', '.join(repr(e) for e in unknown)} (allowed: {', '.join(EVENTS)})"
    if len(set(events)) != len(events):
        return "events lists an event twice"
    return None


def seconds_problem(value: Any, key: str) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 30 * 86400:
        return f"{key} must be a number of seconds between 0 and 2592000, got {value!r}"
    return None


def target_problems(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Everything wrong with one target, as (the key at fault, why): `kind` with its address
    (`url` for a webhook, `to` for e-mail), `events`, the signing secret (`secret` or
    `secret_env`, webhooks only) and the two delays. Keys other than these are the caller's."""
    kind = spec.get("kind")
    if kind not in KINDS:
        return [("kind", f"kind must be one of {', '.join(KINDS)}, got {kind!r}")]
    problems: list[tuple[str, str | None]] = []
    address, other = ("url", "to") if kind == WEBHOOK else ("to", "url")
    if spec.get(other) is not None:
        problems.append((other, f"a {kind} target takes `{address}`, not `{other}`"))
    if kind == WEBHOOK:
        problems.append(("url", url_problem(spec.get("url"))))
    else:
        problems.append(("to", recipients(spec.get("to"))[1]))
        for key in ("secret", "secret_env"):
            if spec.get(key) is not None:
                problems.append((key, "an email target is not signed: `secret` and `secret_env` are for webhooks"))
    problems.append(("events", events_problem(spec.get("events"))))
    problems += _secret_problems(spec)
    for key in ("granted_after_s", "expiring_before_s"):
        if spec.get(key) is not None:
            problems.append((key, seconds_problem(spec[key], key)))
    return [(key, problem) for key, problem in problems if problem]


def _secret_problems(spec: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    secret, env = spec.get("secret"), spec.get("secret_env")
    problems: list[tuple[str, str | None]] = []
    if secret is not None and env is not None:
        problems.append(("secret_env", "give `secret` or `secret_env`, not both"))
    if secret is not None and (not isinstance(secret, str) or not 16 <= len(secret) <= 256):
        problems.append(("secret", "secret must be a string of 16 to 256 characters"))
    if env is not None and (not isinstance(env, str) or not _ENV_NAME.match(env)):
        problems.append(("secret_env", f"secret_env must name an environment variable, got {env!r}"))
    return problems


def teams_problem(teams: Any) -> str | None:
    if not isinstance(teams, list) or not all(isinstance(t, str) and t for t in teams):
        return f"teams must be a list of team names, got {teams!r}"
    return None


def event_list(events: Sequence[str]) -> list[str]:
    """The events in their canonical order (as EVENTS), whatever order they were given in."""
    return [e for e in EVENTS if e in events]
