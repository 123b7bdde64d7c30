"""History endpoints: `GET /api/v1/history/{pools,teams,gpus}/<name>/?range=1h|24h|7d|90d`.

Each answers the charts of one pool, team or GPU over the range (the dashboard's charts fetch
the same JSON when the range changes). A team's history is visible to its members and to pool
admins, as the team itself is; pools and GPUs to every user, as their listings are."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from allocation.selectors import team_list
from core.api.viewsets import ApiView
from history.choices import DEFAULT_RANGE, RANGES
from history.selectors import gpu_history, gpu_window, pool_history, team_history, window_for
from inventory.models import Gpu, Pool


class RangeQuery(serializers.Serializer[Any]):
    range = serializers.ChoiceField(choices=list(RANGES), default=DEFAULT_RANGE,
                                    error_messages={"invalid_choice": "range must be one of 1h, 24h, 7d, 90d "
                                                                      "(got {input!r})"})


def range_of(request: Request) -> str:
    """The validated `range` parameter (a 400 with a code names the bad value)."""
    query = RangeQuery(data=request.query_params)
    query.is_valid(raise_exception=True)
    return str(query.validated_data["range"])


_RANGE = OpenApiParameter("range", str, enum=list(RANGES), default=DEFAULT_RANGE,
                          description="How far back: 1h and 24h in 1-minute points, 7d and 90d in hourly points.")


class HistoryView(ApiView):
    """The one error body documented for 400/401/403/404; unknown parameters refused."""


class PoolHistoryView(HistoryView):
    @extend_schema(summary="A pool's history: utilisation, allocated vs free, queue", parameters=[_RANGE],
                   responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, name: str) -> Response:
        pool = get_object_or_404(Pool, name=name)
        return Response(pool_history(pool, window_for(range_of(request))))


class TeamHistoryView(HistoryView):
    @extend_schema(summary="A team's history: held vs guarantee and limit, waiting time", parameters=[_RANGE],
                   responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, name: str) -> Response:
        team = get_object_or_404(team_list(user=request.user), name=name)
        return Response(team_history(team, window_for(range_of(request))))


class GpuHistoryView(HistoryView):
    @extend_schema(summary="A GPU's history: utilisation, memory, temperature, power", parameters=[_RANGE],
                   responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, uuid: str) -> Response:
        gpu = get_object_or_404(Gpu, uuid=uuid)
        return Response(gpu_history(gpu, gpu_window(range_of(request))))
