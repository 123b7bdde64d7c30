"""Reading an identity provider's claims: the user name and the groups a login carries.

Claim names are configured (`sso: {username_claim, groups_claim}`). A name is looked up as a key
first, so namespaced claims such as `https://example.org/groups` work; only when no such key
exists is a dotted name followed into nested objects (Keycloak's `realm_access.roles`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError

from core.errors import DomainError

MAX_USERNAME = 150  # django.contrib.auth's User.username


class ClaimRefused(DomainError):
    """A login whose claims cannot name a gpupool user (missing, malformed or unverified)."""

    status = 403
    code = "sso_refused"


def claim_value(claims: Mapping[str, Any], name: str) -> Any:
    """The claim `name`: the key itself, else a dotted path into nested objects; None when absent."""
    if name in claims:
        return claims[name]
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def groups_in(claims: Mapping[str, Any], name: str) -> frozenset[str]:
    """The groups the claim `name` lists: a JSON list of strings, or one string for one group
    (some providers send that). Absent, or of another shape: no groups, so a login that lost its
    groups claim loses the memberships the groups gave, never keeps stale ones."""
    value = claim_value(claims, name)
    if isinstance(value, str):
        return frozenset({value}) if value else frozenset()
    if isinstance(value, list | tuple):
        return frozenset(item for item in value if isinstance(item, str) and item)
    return frozenset()


def username_in(claims: Mapping[str, Any], name: str) -> str:
    """The gpupool user name the claim `name` gives. Raises ClaimRefused when it is absent, not a
    valid user name (letters, digits and @.+-_, at most 150), or an e-mail address the provider
    says it has not verified."""
    value = claim_value(claims, name)
    if not isinstance(value, str) or not value.strip():
        raise ClaimRefused(f"the identity provider sent no {name!r} claim to name the user by "
                           f"(sso.username_claim); ask for a scope that carries it")
    value = value.strip()
    if name == "email" and claims.get("email_verified") is False:
        raise ClaimRefused(f"the identity provider has not verified the e-mail address {value!r}")
    try:
        UnicodeUsernameValidator()(value)
    except ValidationError:
        raise ClaimRefused(f"the {name!r} claim {value!r} is not a valid user name "
                           "(letters, digits and @ . + - _ only)") from None
    if len(value) > MAX_USERNAME:
        raise ClaimRefused(f"the {name!r} claim is longer than {MAX_USERNAME} characters")
    return value
