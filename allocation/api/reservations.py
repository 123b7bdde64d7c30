"""Advance reservations: list (every authenticated user: they shape everyone's queue), reserve
(a member for its team, pool admins for any), cancel (the same). Views only translate; the
service (allocation.services.reservations) validates, admits and writes."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from allocation.api.serializers import StrictSerializer
from allocation.filtersets import ReservationFilterSet
from allocation.models import Reservation
from allocation.services.reservations import reservation_cancel, reservation_create
from core.api.viewsets import ReadOnlyViewSet


class ReservationCreateSerializer(StrictSerializer):
    pool = serializers.CharField(max_length=64, help_text="Name of the pool to reserve GPUs in.")
    team = serializers.CharField(max_length=64, help_text="Team the GPUs are kept for.")
    gpus = serializers.IntegerField(min_value=1, max_value=4096, help_text="How many GPUs.")
    model = serializers.CharField(required=False, allow_blank=True, max_length=255, default="",
                                  help_text="As a lease's model: a case-insensitive substring, `A100|H100` "
                                            "for several; empty for any. Some GPU of the pool must match.")
    start = serializers.DateTimeField(help_text="Start of the window (ISO 8601); not in the past.")
    end = serializers.DateTimeField(help_text="End of the window (ISO 8601), after start.")


class ReservationSerializer(serializers.ModelSerializer[Any]):
    pool = serializers.CharField(source="pool.name", read_only=True, help_text="Pool.")
    team = serializers.CharField(source="team.name", read_only=True, help_text="Team the GPUs are kept for.")
    state = serializers.SerializerMethodField(help_text="active, cancelled or ended (its end has passed).")
    created_by = serializers.CharField(source="created_by.username", read_only=True, help_text="Who reserved.")

    class Meta:
        model = Reservation
        fields = ["id", "pool", "team", "gpus", "model", "start", "end", "state", "created_by", "created_at",
                  "cancelled_at", "cancelled_by"]
        read_only_fields = fields
        extra_kwargs = {
            "id": {"help_text": "Reservation id."},
            "gpus": {"help_text": "GPUs kept for the team over the window."},
            "model": {"help_text": "Model pattern the GPUs match; empty: any."},
            "start": {"help_text": "Start of the window."},
            "end": {"help_text": "End of the window."},
            "created_at": {"help_text": "When it was made."},
            "cancelled_at": {"help_text": "When it was cancelled; null if not."},
            "cancelled_by": {"help_text": "Who cancelled it."},
        }

    def get_state(self, obj: Reservation) -> str:
        return obj.current_state()


@extend_schema_view(
    list=extend_schema(summary="List reservations",
                       description="Every reservation (they decide what everyone's leases may take), "
                                   "earliest window first."),
    retrieve=extend_schema(summary="Read a reservation"),
)
class ReservationViewSet(mixins.CreateModelMixin, ReadOnlyViewSet):
    serializer_class = ReservationSerializer
    filterset_class = ReservationFilterSet

    def get_queryset(self) -> QuerySet[Reservation]:
        return Reservation.objects.select_related("pool", "team", "created_by").order_by("start", "pk")

    @extend_schema(summary="Reserve GPUs ahead", request=ReservationCreateSerializer,
                   responses={201: ReservationSerializer},
                   description="Admitted only if, over the window, the pool's matching GPUs less the other "
                               "reservations on them leave `gpus`, and the team's limit leaves room beside its "
                               "own reservations: else 409 `insufficient_capacity` or `over_limit`. Before the "
                               "start, leases of other teams that would outlive it may not take the GPUs; "
                               "during the window they serve only the team, whose pending leases go first. "
                               "400 names the field for bad input; 403 `not_a_member` for another team.")
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = ReservationCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reservation = reservation_create(user=request.user, **body.validated_data)
        return Response(ReservationSerializer(reservation).data, status=status.HTTP_201_CREATED)

    @extend_schema(summary="Cancel a reservation", request=None, responses=ReservationSerializer,
                   description="Its GPUs are free for everyone from the next pass. Cancelling twice is "
                               "harmless; an ended one is a 409 `reservation_ended`; another team's a 403.")
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        reservation = self.get_object()  # a 404 for a malformed or missing id
        reservation = reservation_cancel(reservation_id=reservation.pk, user=request.user)
        return Response(ReservationSerializer(reservation).data)

