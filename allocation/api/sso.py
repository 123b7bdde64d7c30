"""The CLI's single sign-on (`gpupool login --sso`), by the device authorization grant (RFC 8628)
with gpupool as the OAuth client (core/oidc/device.py, docs/sso.md):

1. `POST /api/v1/auth/device/` → `{device_code, user_code, verification_uri,
   verification_uri_complete?, expires_in, interval}`; the CLI shows the URI and the code.
2. `POST /api/v1/auth/device/token/` `{device_code}` every `interval` seconds → 400
   `authorization_pending` (or `slow_down`: add 5 s) until the user has signed in at the provider;
   then 200 with a new API token of the user, whose teams and role follow its groups as at a
   dashboard login. `expired_token`, `access_denied`, `invalid_grant`: stop.

Both are anonymous (the caller has no token yet), throttled per client address, and a 404
`sso_disabled` where single sign-on is not configured.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import SimpleRateThrottle

from allocation.services.sso import sso_device_login
from core.api.schema import ErrorSerializer
from core.api.viewsets import ApiView
from core.oidc.device import device_start


class SsoThrottle(SimpleRateThrottle):
    """Anonymous calls that each reach the identity provider, per client address (OIDC["RATE"])."""

    scope = "sso"

    def get_rate(self) -> str | None:
        return str(settings.OIDC["RATE"])

    def get_cache_key(self, request: Request, view: Any) -> str:
        return str(self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)})


class DeviceStartSerializer(serializers.Serializer[Any]):
    device_code = serializers.CharField(help_text="gpupool's handle of the login: send it to auth/device/token/ "
                                                  "(never shown to the user).")
    user_code = serializers.CharField(help_text="The code the user enters at verification_uri.")
    verification_uri = serializers.URLField(help_text="Where the user signs in (the identity provider's page).")
    verification_uri_complete = serializers.URLField(
        required=False, help_text="verification_uri with the code filled in, when the provider gives one.")
    expires_in = serializers.IntegerField(help_text="Seconds until the codes expire.")
    interval = serializers.IntegerField(help_text="Seconds to wait between two polls of auth/device/token/.")


class DeviceTokenInput(serializers.Serializer[Any]):
    device_code = serializers.CharField(max_length=4096, help_text="The device_code auth/device/ answered.")


class DeviceTokenSerializer(serializers.Serializer[Any]):
    token = serializers.CharField(help_text="A new API token of the user (header `Authorization: Token …`); "
                                            "shown once.")
    username = serializers.CharField(help_text="The gpupool user the login is.")
    teams = serializers.ListField(child=serializers.CharField(), help_text="The user's teams after the login.")
    pool_admin = serializers.BooleanField(help_text="Whether the user is a pool admin.")
    expires_at = serializers.DateTimeField(help_text="When the token stops working (GPUPOOL_OIDC_TOKEN_DAYS).")


_WAITING = OpenApiResponse(ErrorSerializer, description="`authorization_pending` or `slow_down` (poll again after "
                                                        "`interval`, +5 s for slow_down); `expired_token`, "
                                                        "`invalid_grant`: start again.")


class SsoView(ApiView):
    authentication_classes: list[Any] = []  # no credentials yet: that is what these calls are for
    permission_classes = [AllowAny]
    throttle_classes = [SsoThrottle]


class DeviceStartView(SsoView):
    @extend_schema(summary="Start a device login (gpupool login --sso)", request=None,
                   responses={200: DeviceStartSerializer})
    def post(self, request: Request) -> Response:
        return Response(DeviceStartSerializer(device_start()).data)


class DeviceTokenView(SsoView):
    @extend_schema(summary="Finish a device login: an API token once the user has signed in",
                   request=DeviceTokenInput, responses={200: DeviceTokenSerializer, 400: _WAITING})
    def post(self, request: Request) -> Response:
        given = DeviceTokenInput(data=request.data)
        given.is_valid(raise_exception=True)
        done = sso_device_login(device_code=given.validated_data["device_code"])
        return Response(DeviceTokenSerializer(done).data, status=status.HTTP_200_OK)
