"""`Authorization: Token <key>` (or `Bearer <key>`, the same key) for DRF, through
`core.tokens.token_lookup` (hashed keys, expiry, revocation, a 5 s per-process cache keyed by
digest: see its docstring).

Refusals are 401s with a code: DRF's `authentication_failed` for an unknown key or an inactive
user, `token_expired` or `token_revoked` for a key that once worked."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.request import Request

from core.tokens import TokenRefused, clear_token_cache, key_from_authorization, token_lookup

__all__ = ["CachedTokenAuthentication", "clear_token_cache"]


class CachedTokenAuthentication(TokenAuthentication):
    """DRF's token header, checked against hashed, expiring, revocable tokens. `request.auth` is
    the ApiToken (its `scope` is enforced by core.api.permissions.TokenScopeAllows). The header's
    scheme is `Token` or `Bearer` (core.tokens.AUTH_SCHEMES); another scheme is left to the next
    authentication class, as DRF does."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        try:
            header = get_authorization_header(request).decode()
            key = key_from_authorization(header)
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid token header. Token string should not contain "
                                                  "invalid characters.") from None
        except ValueError as bad:
            raise exceptions.AuthenticationFailed(f"Invalid token header: {bad}.") from None
        return None if key is None else self.authenticate_credentials(key)

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        try:
            token = token_lookup(key)
        except TokenRefused as refused:
            if refused.code == TokenRefused.code:
                raise exceptions.AuthenticationFailed("Invalid token.") from None
            raise exceptions.AuthenticationFailed(refused.message, code=refused.code) from None
        return token.user, token
