"""The base viewsets: every API endpoint shares authentication, permissions, the body size limit,
strict input (core.api.strict), filtering, pagination and the error body through these (STYLE #16)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import mixins, viewsets
from rest_framework.generics import get_object_or_404
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.views import APIView

from core.api.errors import PayloadTooLarge
from core.api.permissions import TokenScopeAllows
from core.api.schema import GpupoolAutoSchema
from core.api.strict import check_request


def check_body_size(request: Request) -> None:
    """Refuse a body over DATA_UPLOAD_MAX_MEMORY_SIZE with a 413 before anything parses it.

    DRF's parsers read the raw stream and so bypass Django's own check on `request.body`; the
    declared Content-Length is what the WSGI server will hand over (chunked bodies without one
    reach DRF as empty)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is None:
        return
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        raise PayloadTooLarge(f"the request body is {length} bytes; at most {limit} are accepted")


class ApiViewSet(viewsets.GenericViewSet[Any]):
    """Authenticated by default; reads answer 404 for rows outside the caller's scope because
    `get_queryset()` of each subclass is already scoped to the caller."""

    permission_classes = [IsAuthenticated]
    schema = GpupoolAutoSchema()

    def check_permissions(self, request: Request) -> None:
        """The token's scope first, then the view's or action's own permissions: a subclass or an
        action naming its own permissions (or overriding get_permissions) cannot let a read-only
        token write."""
        scope = TokenScopeAllows()
        if not scope.has_permission(request, self):
            self.permission_denied(request, message=scope.message, code=scope.code)
        super().check_permissions(request)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        check_body_size(request)
        super().initial(request, *args, **kwargs)
        # After authentication and permissions: who may not call an endpoint learns nothing of
        # its parameters.
        check_request(self, request)

    def get_object(self) -> Any:
        """The row named in the URL, within the caller's scope. Unlike DRF's default, list filters in
        the query string do not apply (`?state=` must not hide the lease being released); a
        malformed key is a 404 like a missing one."""
        lookup = self.lookup_url_kwarg or self.lookup_field or "pk"
        obj = get_object_or_404(self.get_queryset(), **{self.lookup_field or "pk": self.kwargs[lookup]})
        self.check_object_permissions(self.request, obj)
        return obj


class ReadOnlyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ApiViewSet):
    """Subclasses set queryset (or get_queryset), serializer_class and filterset_class; actions add
    writes."""


class ApiView(APIView):
    """For the few plain APIViews (history): the same schema class and strict input."""

    schema = GpupoolAutoSchema()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        check_request(self, request)
