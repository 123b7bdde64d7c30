"""`manage.py apitoken`: a new key as the last line (the contract), read-only and expiring tokens,
a user's tokens listed without their keys, one revoked by its prefix."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from core.models import ApiToken
from core.tokens import token_lookup

pytestmark = pytest.mark.django_db


def _run(*args: str) -> str:
    out = StringIO()
    call_command("apitoken", *args, stdout=out)
    return out.getvalue()


def test_the_last_line_is_a_working_write_token_and_each_call_issues_another(db: Any) -> None:
    first = _run("alice", "--admin", "--team", "vision").splitlines()[-1]
    second = _run("alice").splitlines()[-1]
    assert first != second
    token = token_lookup(first)
    assert token.user.username == "alice" and token.user.is_staff and token.scope == "write"
    assert token.expires_at is None and token_lookup(second).user == token.user
    assert token.user.teams.filter(name="vision").exists()


def test_read_only_expiring_named_tokens(db: Any) -> None:
    key = _run("ci", "--read-only", "--expires-days", "30", "--name", "nightly CI").splitlines()[-1]
    token = token_lookup(key)
    assert token.scope == "read" and token.name == "nightly CI"
    assert token.expires_at is not None
    assert 29.9 < (token.expires_at - timezone.now()).total_seconds() / 86400 <= 30


def test_list_shows_prefixes_and_states_never_keys(db: Any) -> None:
    keep = _run("alice", "--name", "laptop").splitlines()[-1]
    gone = _run("alice", "--read-only").splitlines()[-1]
    _run("--revoke", gone[:8])
    listing = _run("--list", "alice")
    assert keep not in listing and gone not in listing
    lines = {line.split()[0]: line for line in listing.splitlines()[1:]}
    assert "active" in lines[keep[:8]] and "laptop" in lines[keep[:8]]
    assert "revoked" in lines[gone[:8]] and " read " in lines[gone[:8]]
    for digest in ApiToken.objects.values_list("digest", flat=True):
        assert digest not in listing


def test_revoke_by_prefix_is_idempotent_and_refuses_unknown_prefixes(db: Any) -> None:
    key = _run("alice").splitlines()[-1]
    assert "revoked" in _run("--revoke", key[:8])
    assert "already revoked" in _run("--revoke", key[:8])
    assert ApiToken.objects.get().revoked_at is not None
    with pytest.raises(CommandError, match="no token starts with"):
        _run("--revoke", "zzzzzzzz")


def test_bad_arguments_are_clear_errors(db: Any) -> None:
    with pytest.raises(CommandError, match="USERNAME is required"):
        _run()
    with pytest.raises(CommandError, match="--expires-days"):
        _run("alice", "--expires-days", "0")
    assert not ApiToken.objects.exists()
