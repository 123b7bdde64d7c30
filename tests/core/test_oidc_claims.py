"""Reading claims (core.oidc.claims) and naming the discovery document: pure, no provider."""

from __future__ import annotations

from typing import Any

import pytest

from core.oidc.claims import ClaimRefused, claim_value, groups_in, username_in
from core.oidc.client import discovery_url

NESTED = {"realm_access": {"roles": ["a", "b"]}, "https://example.org/groups": ["ns"], "plain": "x"}


@pytest.mark.parametrize(("name", "value"), [
    ("plain", "x"), ("realm_access.roles", ["a", "b"]), ("https://example.org/groups", ["ns"]),
    ("realm_access.missing", None), ("absent", None), ("plain.deeper", None),
])
def test_a_claim_is_a_key_first_then_a_dotted_path(name: str, value: Any) -> None:
    assert claim_value(NESTED, name) == value


@pytest.mark.parametrize(("value", "groups"), [
    (["a", "b", "a"], {"a", "b"}), ("solo", {"solo"}), ("", set()), (None, set()), (42, set()),
    (["a", 1, None, ""], {"a"}), ({"a": 1}, set()),
])
def test_groups_are_a_list_of_strings_or_one_string_and_nothing_else(value: Any, groups: set[str]) -> None:
    assert groups_in({"groups": value}, "groups") == groups


def test_a_user_name_is_validated_as_django_does() -> None:
    assert username_in({"preferred_username": " alice.b+1@x "}, "preferred_username") == "alice.b+1@x"
    for bad in ("a b", "ä" * 151, "<script>"):
        with pytest.raises(ClaimRefused):
            username_in({"preferred_username": bad}, "preferred_username")


@pytest.mark.parametrize(("issuer", "url"), [
    ("https://idp.example.org", "https://idp.example.org/.well-known/openid-configuration"),
    ("https://idp.example.org/realms/x/", "https://idp.example.org/realms/x/.well-known/openid-configuration"),
    ("https://idp.example.org/.well-known/openid-configuration",
     "https://idp.example.org/.well-known/openid-configuration"),
])
def test_the_discovery_document_is_found_from_the_issuer_or_given_as_is(issuer: str, url: str) -> None:
    assert discovery_url(issuer) == url
