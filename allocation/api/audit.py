"""The audit log, read-only: admins see every event, members the events of their teams' leases."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view

from allocation.api.serializers import AuditEventSerializer
from allocation.filtersets import AuditEventFilterSet
from allocation.models import AuditEvent
from allocation.selectors import audit_event_list
from core.api.viewsets import ReadOnlyViewSet


@extend_schema_view(
    list=extend_schema(summary="List audit events", description="Newest first. Admins: every event; "
                       "members: the events of their teams' leases."),
    retrieve=extend_schema(summary="Read an audit event"),
)
class AuditEventViewSet(ReadOnlyViewSet):
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilterSet

    def get_queryset(self) -> QuerySet[AuditEvent]:
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return AuditEvent.objects.none()
        return audit_event_list(user=self.request.user)
