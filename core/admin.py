"""API tokens in the Django admin, for pool admins: who holds which token, its scope, expiry and
last use, and a revoke action. Never a key or a digest: the key was shown once, when issued
(`manage.py apitoken`), and the digest is of no use to a person."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from core.models import ApiToken, OidcIdentity
from core.roles import is_pool_admin
from core.tokens import token_revoke


class PoolAdminsLook:
    """Rows the system writes: pool admins see them, nobody adds or edits them here."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_pool_admin(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_pool_admin(request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ApiToken)
class ApiTokenAdmin(PoolAdminsLook, admin.ModelAdmin[ApiToken]):
    list_display = ["prefix", "user", "name", "scope", "created_at", "expires_at", "last_used_at", "revoked_at",
                    "state"]
    list_filter = ["scope", "revoked_at"]
    search_fields = ["prefix", "name", "user__username"]
    list_select_related = ["user"]
    fields = ["prefix", "user", "name", "scope", "created_at", "expires_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "user", "name", "scope", "created_at", "expires_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    # Tokens are issued by `manage.py apitoken` (the key must be shown once, to its holder) and
    # revoked, not deleted, so their history stays; pool admins look and revoke.
    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return is_pool_admin(request.user)

    @admin.display(description="state")
    def state(self, obj: ApiToken) -> str:
        return obj.state

    @admin.action(description="Revoke the selected tokens", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        revoked = [token for token in queryset if token_revoke(token=token, by=request.user.get_username())]
        self.message_user(request, f"{len(revoked)} token(s) revoked", messages.SUCCESS)


@admin.register(OidcIdentity)
class OidcIdentityAdmin(PoolAdminsLook, admin.ModelAdmin[OidcIdentity]):
    """Which provider account each user signs in as (docs/sso.md). Made by the first single
    sign-on; a pool admin deletes one to unlink it (the next login links again by user name)."""

    list_display = ["user", "issuer", "subject", "granted_admin", "created_at", "last_login_at"]
    search_fields = ["user__username", "subject", "issuer"]
    list_select_related = ["user"]
    readonly_fields = ["user", "issuer", "subject", "granted_admin", "created_at", "last_login_at"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_pool_admin(request.user)
