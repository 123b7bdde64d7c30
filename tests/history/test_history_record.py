"""Recording a minute: the points say what the pools, teams and models look like, written with one
INSERT per table, and a second recording of the same minute adds nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from history.choices import Step
from history.models import ModelPoint, PoolPoint, TeamPoolPoint
from history.services import history_record

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 3, 2, 10, 17, 42, tzinfo=UTC)


def test_a_minute_point_per_pool_holds_its_counts_queue_and_utilisation(busy_fleet: Any) -> None:
    report = history_record(now=NOW)
    assert report.minute == datetime(2026, 3, 2, 10, 17, tzinfo=UTC)
    training = PoolPoint.objects.get(pool=busy_fleet.pools["training"], step=Step.MINUTE)
    assert training.at == report.minute
    assert (training.capacity, training.allocated, training.free) == (32, 28, 4)
    assert (training.queue_length, training.pending_gpus, training.util_pct) == (3, 24, 50.0)
    inference = PoolPoint.objects.get(pool=busy_fleet.pools["inference"])
    assert (inference.capacity, inference.allocated, inference.queue_length) == (8, 0, 0)


def test_a_team_point_holds_held_borrowed_quota_and_the_age_of_its_waiting_leases(busy_fleet: Any) -> None:
    from django.utils import timezone

    history_record(now=timezone.now())  # the fixture's leases were created a few minutes before now
    training = busy_fleet.pools["training"]
    vision = TeamPoolPoint.objects.get(team=busy_fleet.teams["vision"], pool=training)
    assert (vision.held, vision.borrowed, vision.guaranteed, vision.limit) == (12, 4, 8, 24)
    assert vision.pending_gpus == 0 and vision.wait_s is None
    nlp = TeamPoolPoint.objects.get(team=busy_fleet.teams["nlp"], pool=training)
    assert (nlp.held, nlp.limit, nlp.pending_gpus) == (16, 16, 24)
    # Three leases wait: the ages are measured from their creation to the recorded minute.
    assert nlp.wait_max_s == pytest.approx(600, abs=70) and nlp.wait_s == pytest.approx(500, abs=70)
    unlimited = TeamPoolPoint.objects.get(team=busy_fleet.teams["nlp"], pool=busy_fleet.pools["inference"])
    assert unlimited.limit is None and unlimited.guaranteed == 4


def test_utilisation_is_kept_per_model_and_leaves_out_offline_gpus(busy_fleet: Any) -> None:
    from inventory.models import Gpu

    Gpu.objects.filter(pool=busy_fleet.pools["training"], index__lt=4).update(utilization_pct=90.0)
    Gpu.objects.filter(pool=busy_fleet.pools["inference"], index=0).update(state="offline", utilization_pct=0.0)
    history_record(now=NOW)
    h100 = ModelPoint.objects.get(pool=busy_fleet.pools["training"])
    assert h100.model == "NVIDIA H100 80GB HBM3" and h100.gpus == 32
    assert h100.util_pct == pytest.approx((16 * 90 + 16 * 50) / 32)
    a100 = ModelPoint.objects.get(pool=busy_fleet.pools["inference"])
    assert (a100.gpus, a100.util_pct) == (6, 50.0)
    assert PoolPoint.objects.get(pool=busy_fleet.pools["training"]).util_pct == pytest.approx(70.0)


def test_each_table_is_written_by_one_insert_whatever_the_fleet(busy_fleet: Any) -> None:
    with CaptureQueriesContext(connection) as queries:
        history_record(now=NOW)
    inserts = [q["sql"].split('"')[1] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert sorted(inserts) == ["history_modelpoint", "history_poolpoint", "history_teampoolpoint"]
    assert len(queries.captured_queries) < 30


def test_recording_the_same_minute_again_adds_nothing_and_keeps_the_first_values(busy_fleet: Any) -> None:
    from inventory.models import Gpu

    history_record(now=NOW)
    counts = (PoolPoint.objects.count(), TeamPoolPoint.objects.count(), ModelPoint.objects.count())
    Gpu.objects.update(utilization_pct=10.0)
    history_record(now=NOW.replace(second=59))
    assert (PoolPoint.objects.count(), TeamPoolPoint.objects.count(), ModelPoint.objects.count()) == counts
    assert set(PoolPoint.objects.values_list("util_pct", flat=True)) == {50.0}
    history_record(now=NOW.replace(minute=18))
    assert PoolPoint.objects.count() == 2 * counts[0]


def test_the_beat_task_records_the_minute(busy_fleet: Any) -> None:
    from history.tasks import record_history
    from pool.celery import app

    assert app.conf.beat_schedule["record-history"]["task"] == record_history.name == "history.record"
    record_history.apply()  # in this process, through the project's task wrapper
    assert PoolPoint.objects.filter(step=Step.MINUTE).count() == 2
