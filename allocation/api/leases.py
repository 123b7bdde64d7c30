"""The lease endpoints: list/read (own teams; admins all), request, renew, release, audit trail.

Views only translate: input serializers validate, services (allocation.services.*) decide."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle

from allocation.api import exec as exec_api
from allocation.api import lease_batch as batch_api
from allocation.api import logs as log_api
from allocation.api import shells as shell_api
from allocation.api.lease_json import lease_dict, lease_dicts, lease_etag, lease_rows, render_rows
from allocation.api.lease_topology import LeaseCreateSerializer, LeaseSerializer
from allocation.api.serializers import (
    AuditEventSerializer,
    ReleaseSerializer,
    RenewQuerySerializer,
    RenewSerializer,
)
from allocation.api.throttles import LeaseCreateThrottle
from allocation.filtersets import LeaseFilterSet
from allocation.models import Lease
from allocation.selectors import lease_list
from allocation.services.leases import lease_create, lease_release, lease_renew
from core.api.renderers import JSONRenderer
from core.api.viewsets import ReadOnlyViewSet
from core.errors import DomainError


@extend_schema_view(
    list=extend_schema(summary="List leases", description="Leases of your teams, newest first (admins: all)."),
    retrieve=extend_schema(
        summary="Read a lease (or wait for it to change)",
        description="Another team's lease is a 404. With `wait`, a long poll: the answer comes as soon as "
                    "the lease's state differs from `state` (default: its state when the call arrives) or, "
                    "with `seen`, as soon as anything in the lease differs from the answer that carried "
                    "that ETag (reason, queue position, estimated start too), or after `wait` seconds (at "
                    "most 60) with the lease unchanged. Every answer has an `ETag` header. Served without "
                    "holding a request thread by the ASGI front (pool.asgi).",
        parameters=[OpenApiParameter("wait", float, description="Seconds to wait for a change (0-60)."),
                    OpenApiParameter("state", str, description="The state you last saw; answer once it differs."),
                    OpenApiParameter("seen", str, description="The ETag of the lease you last saw; answer once "
                                                              "anything in it differs.")]),
)
class LeaseViewSet(mixins.CreateModelMixin, ReadOnlyViewSet):
    """Leases of the caller's teams (pool admins see all). Another team's lease is a 404.

    Answers are rendered by allocation.api.lease_json (LeaseSerializer's output without its
    per-field cost; LeaseSerializer stays the documented schema)."""

    serializer_class = LeaseSerializer
    filterset_class = LeaseFilterSet

    def get_queryset(self) -> QuerySet[Lease]:
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return Lease.objects.none()
        return lease_list(user=self.request.user, related=self.action not in ("list", "events"))

    def get_throttles(self) -> list[BaseThrottle]:
        return [LeaseCreateThrottle()] if self.action == "create" else super().get_throttles()

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        rows = lease_rows(self.filter_queryset(self.get_queryset()))
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(render_rows(page if page is not None else list(rows)))

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """The lease, with its ETag (the long poll's `seen` takes it)."""
        found = lease_dicts([kwargs["pk"]], visible_to=request.user)
        if not found:
            raise NotFound()
        return Response(found[0], headers={"ETag": f'"{lease_etag(JSONRenderer().render(found[0]))}"'})

    @extend_schema(summary="Request GPUs", request=LeaseCreateSerializer,
                   responses={201: LeaseSerializer, 200: LeaseSerializer},
                   description="Creates a pending lease; a scheduling pass grants it. Answers 200 with the "
                               "first lease for a repeated Idempotency-Key and body, 409 for a reused key "
                               "with another body, 400 when no capacity could ever satisfy it, 403 "
                               "`budget_exhausted` when a spent `block_new` GPU-hour budget of the team "
                               "refuses it (`details`: the budget, `used_gpu_hours`, `gpu_hours`, "
                               "`resets_at`); a spent `lower_priority` budget gives it the lowest priority "
                               "class instead, and its `reason` says so. 429 `queue_full` when the team's "
                               "queue in the pool is at one of the pool's `queue_caps` (`details`: `cap`, "
                               "`limit`, `pending_leases`, `pending_gpus`); 429 `throttled`, with Retry-After, "
                               "over the user's lease rate. A new lease's `pending_code` is `next_pass`.",
                   parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER,
                                                description="Same key + same body returns the same lease.")])
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = LeaseCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key = _idempotency_key(request)
        lease, created = lease_create(user=request.user, idempotency_key=key, **body.validated_data)
        if created:  # a new lease holds no GPUs yet: nothing to read back
            return Response(lease_dict(lease, gpus=[]), status=status.HTTP_201_CREATED)
        return Response(lease_dict(lease), status=status.HTTP_200_OK)

    @batch_api.DOCUMENTED
    @action(detail=False, methods=["post"], url_path="batch", url_name="batch", pagination_class=None,
            filterset_class=None, parser_classes=batch_api.PARSERS)
    def batch(self, request: Request) -> Response:
        """Many lease requests in one transaction (allocation/api/lease_batch.py)."""
        return batch_api.batch_answer(request)

    @extend_schema(summary="Renew a lease", request=RenewSerializer, responses=LeaseSerializer,
                   parameters=[RenewQuerySerializer])
    @action(detail=True, methods=["post"])
    def renew(self, request: Request, pk: str | None = None) -> Response:
        """Push the lease's expiry to now + TTL (a heartbeat). 409 for an ended lease. `?keep=true`
        (pool admins only, else 403 `keep_requires_admin`) also exempts it from idle reclaim."""
        query = RenewQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        body = RenewSerializer(data=request.data or {})
        body.is_valid(raise_exception=True)
        lease = lease_renew(lease=pk, actor=request.user.username, visible_to=request.user,
                            ttl_seconds=body.validated_data["ttl_seconds"],
                            keep=query.validated_data["keep"], user=request.user)
        return Response(lease_dict(lease))

    @extend_schema(summary="Release a lease", request=ReleaseSerializer, responses=LeaseSerializer)
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str | None = None) -> Response:
        """End the lease (or cancel it while pending). Releasing twice is harmless."""
        body = ReleaseSerializer(data=request.data or {})
        body.is_valid(raise_exception=True)
        lease = lease_release(lease=pk, actor=request.user.username, visible_to=request.user,
                              reason=body.validated_data["reason"])
        return Response(lease_dict(lease))

    @extend_schema(
        summary="Stream lease changes (Server-Sent Events)", request=None, filters=False,
        responses={(200, "text/event-stream"): {"type": "string"}},
        description="One event per change of a lease of your teams (`team`, `pool` narrow it): `id:` the "
                    "event id, `event: lease`, `data:` the lease JSON. It opens with a `bookmark` event "
                    "carrying the current position. Resume with `since` or the `Last-Event-ID` header; a "
                    "resume point no longer kept is a 410 `event_id_expired` (list, then watch again).",
        parameters=[OpenApiParameter("team", str), OpenApiParameter("pool", str),
                    OpenApiParameter("since", str, description="Resume after this event id."),
                    OpenApiParameter("timeout", float, description="End the stream after this many seconds "
                                                                   "(default 1800).")])
    @action(detail=False, methods=["get"], url_path="events", url_name="watch", pagination_class=None,
            filterset_class=None)
    def watch(self, request: Request) -> Response:
        """Served by the ASGI front (pool.asgi), which answers before Django is reached; a WSGI-only
        deployment has no event stream and says so (404: not on this server)."""
        return Response({"code": "not_available", "message": "the lease event stream is served by the "
                         "ASGI application (pool.asgi:application); this server runs without it"}, status=404)

    @log_api.DOCUMENTED
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None,
            content_negotiation_class=log_api.AnyAccept)
    def logs(self, request: Request, pk: str | None = None) -> StreamingHttpResponse:
        """The workload's output (allocation/api/logs.py). The ASGI front answers it before Django
        is reached; this serves a WSGI-only server, from a request thread."""
        return log_api.log_response(request.user, pk, request.query_params)

    @exec_api.DOCUMENTED
    @action(detail=True, methods=["get"], url_path="exec", url_name="exec", pagination_class=None,
            filterset_class=None)
    def exec(self, request: Request, pk: str | None = None) -> Response:
        """A websocket on the ASGI front (allocation/watch/exec.py); here, the same checks, then 426."""
        exec_api.plain_http_answer(request.user, pk, request.query_params)

    @shell_api.ADD_DOC
    @shell_api.LIST_DOC
    @action(detail=True, methods=["get", "post"], url_path="ssh-keys", url_name="ssh-keys", pagination_class=None,
            filterset_class=None)
    def ssh_keys(self, request: Request, pk: str | None = None) -> Response:
        """Keys that log in to the lease's host for its life (allocation/api/shells.py)."""
        return shell_api.keys_answer(request, pk)

    @shell_api.REMOVE_DOC
    @action(detail=True, methods=["delete"], url_path=r"ssh-keys/(?P<key>[0-9]+)", url_name="ssh-key",
            pagination_class=None, filterset_class=None)
    def ssh_key(self, request: Request, pk: str | None = None, key: str | None = None) -> Response:
        return shell_api.remove_answer(request, pk, key)

    @extend_schema(summary="A lease's audit trail", request=None, responses=AuditEventSerializer(many=True),
                   filters=False)
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def events(self, request: Request, pk: str | None = None) -> Response:
        """Every change of state of the lease, oldest first, with who and why."""
        lease = self.get_object()
        events = lease.audit_events.order_by("at", "id")
        return Response(AuditEventSerializer(events, many=True).data)


def _idempotency_key(request: Request) -> str:
    """The Idempotency-Key header ("" when absent). A key is compared whole, so one too long to
    store or with control characters is refused rather than cut (two keys sharing their first
    255 characters would otherwise name the same lease)."""
    key = request.headers.get("Idempotency-Key", "")
    if len(key) > 255 or not key.isprintable():
        raise DomainError("Idempotency-Key must be at most 255 printable characters",
                          code="invalid_idempotency_key",
                          details={"Idempotency-Key": ["at most 255 printable characters"]})
    return key
