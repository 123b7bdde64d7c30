"""The history endpoints: the charts of a pool, a team and a GPU over a chosen range, the range
validated (a JSON error with a code), a team's history only for its members and pool admins."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from history.choices import Step
from history.models import GpuPoint

pytestmark = pytest.mark.django_db


def _chart(body: dict[str, Any], chart_id: str) -> dict[str, Any]:
    return next(c for c in body["charts"] if c["id"] == chart_id)


def _series(chart: dict[str, Any], key: str) -> dict[str, Any]:
    return next(s for s in chart["series"] if s["key"] == key)


def test_a_pools_history_has_utilisation_per_model_allocation_and_queue(recorded: Any, api: Any,
                                                                         make_user: Any) -> None:
    response = api(make_user("alice")).get("/api/v1/history/pools/training/?range=1h")
    assert response.status_code == 200
    body = response.json()
    assert (body["range"], body["step_s"]) == ("1h", Step.MINUTE)
    assert [c["id"] for c in body["charts"]] == ["utilisation", "allocation", "queue"]
    allocation = _chart(body, "allocation")
    assert len(allocation["at"]) == 3
    assert _series(allocation, "allocated")["values"] == [28, 28, 28]
    assert _series(allocation, "free")["summary"] == {"latest": 4, "mean": 4, "peak": 4}
    utilisation = _chart(body, "utilisation")
    assert [s["label"] for s in utilisation["series"]] == ["Pool mean", "NVIDIA H100 80GB HBM3"]
    assert _series(_chart(body, "queue"), "queue_length")["values"] == [3, 3, 3]


def test_long_ranges_read_hourly_points(recorded: Any, api: Any, make_user: Any) -> None:
    from datetime import datetime

    from history.models import PoolPoint

    training = recorded.pools["training"]
    PoolPoint.objects.create(pool=training, step=Step.HOUR, at=timezone.now() - timedelta(days=3, minutes=5),
                             capacity=32, allocated=20, free=12, pending_gpus=0, queue_length=0, queue_length_max=0)
    body = api(make_user("alice")).get("/api/v1/history/pools/training?range=7d").json()
    assert body["step_s"] == Step.HOUR
    at = _chart(body, "allocation")["at"]
    # Hourly points only (the one made here, and any hour the recordings rolled up), none of the minutes.
    assert len(at) == PoolPoint.objects.filter(pool=training, step=Step.HOUR).count() >= 1
    assert _series(_chart(body, "allocation"), "allocated")["values"][0] == 20
    assert datetime.fromisoformat(at[0]) < timezone.now() - timedelta(days=2)


def test_a_teams_history_is_held_against_guarantee_and_limit_with_waiting_time(recorded: Any, api: Any,
                                                                              make_user: Any) -> None:
    carol = make_user("carol", teams=("nlp",))
    body = api(carol).get("/api/v1/history/teams/nlp/").json()
    assert body["range"] == "24h"
    quota = _chart(body, "quota-training")
    assert _series(quota, "held")["values"] == [16, 16, 16]
    assert _series(quota, "limit")["summary"]["latest"] == 16
    wait = _chart(body, "wait-training")
    assert wait["unit"] == "min" and 8 <= _series(wait, "wait_max_s")["summary"]["peak"] <= 12
    unlimited = _chart(body, "quota-inference")
    assert _series(unlimited, "limit")["values"] == [None, None, None]


def test_a_team_is_hidden_from_non_members_but_not_from_pool_admins(recorded: Any, api: Any,
                                                                      make_user: Any) -> None:
    outsider = api(make_user("dave", teams=("research",))).get("/api/v1/history/teams/nlp/")
    assert outsider.status_code == 404 and outsider.json()["code"] == "not_found"
    admin = api(make_user("root", admin=True)).get("/api/v1/history/teams/nlp/")
    assert admin.status_code == 200 and admin.json()["charts"]


def test_a_gpus_history_reads_samples_for_the_last_hour_and_hourly_points_beyond(
        recorded: Any, api: Any, make_user: Any) -> None:
    from inventory.models import Gpu, GpuSample

    gpu = Gpu.objects.filter(pool__name="training").order_by("pk").first()
    assert gpu is not None
    GpuSample.objects.filter(gpu=gpu).delete()
    now = timezone.now()
    GpuSample.objects.bulk_create([GpuSample(gpu=gpu, at=now - timedelta(minutes=m), utilization_pct=m,
                                             temperature_c=50) for m in (90, 30, 20, 10)])
    client = api(make_user("alice"))
    hour = client.get(f"/api/v1/history/gpus/{gpu.uuid}/?range=1h").json()
    assert hour["step_s"] == Step.MINUTE
    assert _series(_chart(hour, "util"), "util_pct")["values"] == [30, 20, 10]  # oldest first
    assert _series(_chart(hour, "temperature"), "temperature_c")["summary"]["mean"] == 50
    assert [c["id"] for c in hour["charts"]] == ["util", "memory", "temperature", "power"]
    GpuPoint.objects.create(gpu=gpu, at=timezone.now() - timedelta(days=3), util_pct=42, power_w=250)
    week = client.get(f"/api/v1/history/gpus/{gpu.uuid}/?range=7d").json()
    assert week["step_s"] == Step.HOUR
    assert _series(_chart(week, "util"), "util_pct")["values"] == [42]
    assert _series(_chart(week, "power"), "power_w")["summary"]["peak"] == 250


@pytest.mark.parametrize("query", ["range=2w", "range=1y", "range=90D"])
def test_an_unknown_range_is_a_400_that_names_the_choices(recorded: Any, api: Any, make_user: Any,
                                                          query: str) -> None:
    response = api(make_user("alice")).get(f"/api/v1/history/pools/training/?{query}")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid" and "1h, 24h, 7d, 90d" in body["message"]


def test_unknown_names_are_404s_and_anonymous_callers_401s(recorded: Any, api: Any, make_user: Any) -> None:
    client = api(make_user("alice"))
    for path in ("pools/nope/", "teams/nope/", "gpus/GPU-nope/"):
        response = client.get(f"/api/v1/history/{path}")
        assert (response.status_code, response.json()["code"]) == (404, "not_found"), path
    assert api().get("/api/v1/history/pools/training/").status_code == 401
