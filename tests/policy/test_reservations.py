"""Advance reservations in the policy: GPUs kept from long leases before the window, backfill
of short ones, the owner served first at the start, other teams kept off during the window, and
nothing held after the end."""

from __future__ import annotations

import pytest

from allocation.policy import fair, fifo
from allocation.policy.types import ReservationView
from tests.policy.factories import A100, fleet, grants, ids, pendings, req, run, snap

NOW = 10_000.0
GPUS = fleet(2)  # 16 H100 on node-0 and node-1
POLICIES = [fair.schedule, fifo.schedule]


def booking(gpus: int, *, start: float, end: float, team: str = "a", model: str = "",
            rid: str = "r1") -> ReservationView:
    return ReservationView(rid, team, "p", gpus, start, end, model)


LATER = booking(12, start=NOW + 3600, end=NOW + 7200)
NOW_ON = booking(8, start=NOW - 60, end=NOW + 3600)


@pytest.mark.parametrize("schedule", POLICIES)
def test_before_its_start_a_reservation_keeps_its_gpus_from_leases_that_would_outlive_it(schedule) -> None:
    d = schedule(snap(GPUS, [req("long", "b", 8)], now=NOW, reservations=(LATER,)))
    assert not d.grants
    reason = pendings(d)["long"].reason
    assert "12 GPUs of NVIDIA H100 80GB HBM3 in pool p are reserved for team a (reservation r1" in reason
    assert "a lease that would still run at its start may not take them" in reason


@pytest.mark.parametrize("schedule", POLICIES)
def test_a_lease_that_leaves_enough_free_for_the_reservation_is_granted(schedule) -> None:
    d = schedule(snap(GPUS, [req("small", "b", 4)], now=NOW, reservations=(LATER,)))
    assert "small" in grants(d)


@pytest.mark.parametrize("schedule", POLICIES)
def test_a_lease_that_ends_before_the_start_may_backfill_the_held_gpus(schedule) -> None:
    pending = [req("short", "b", 8, expected_duration_s=1800),
               req("too-long", "c", 8, expected_duration_s=3601)]
    d = schedule(snap(GPUS, pending, now=NOW, reservations=(LATER,)))
    assert set(grants(d)) == {"short"}


@pytest.mark.parametrize("schedule", POLICIES)
def test_the_owner_is_not_held_back_by_its_own_reservation(schedule) -> None:
    d = schedule(snap(GPUS, [req("own", "a", 16, same_host=False)], now=NOW, reservations=(LATER,)))
    assert "own" in grants(d)


@pytest.mark.parametrize("schedule", POLICIES)
def test_during_the_window_other_teams_are_kept_off_the_reserved_gpus(schedule) -> None:
    d = schedule(snap(GPUS, [req("big", "b", 12, same_host=False)], now=NOW, reservations=(NOW_ON,)))
    assert not d.grants
    assert pendings(d)["big"].reason.startswith(
        "8 GPUs of NVIDIA H100 80GB HBM3 in pool p are reserved for team a (reservation r1, 8 GPUs until ")
    d = schedule(snap(GPUS, [req("fits", "b", 8)], now=NOW, reservations=(NOW_ON,)))
    assert "fits" in grants(d)


def test_what_the_team_already_holds_counts_toward_its_reservation() -> None:
    running = [run("mine", "a", ids(GPUS, "node-0")[:6])]  # 6 of the 8 reserved: 2 still held
    pending = [req("b8", "b", 8, created_at=1), req("b1", "b", 1, created_at=2)]
    d = fair.schedule(snap(GPUS, pending, running, now=NOW, reservations=(NOW_ON,)))
    assert set(grants(d)) == {"b8"}  # 10 free, 2 kept: 8 may go, not one more
    assert "1 GPU" not in pendings(d)["b1"].reason and "2 GPUs of" in pendings(d)["b1"].reason


def test_at_the_start_the_owner_is_granted_the_held_gpus_first() -> None:
    # z keeps 2 GPUs on each host; b's urgent gang cannot fit and becomes a backfill head that a
    # spread request of a would be behind, were a not served first from its reservation.
    running = [run("z0", "z", ids(GPUS, "node-0")[:2]), run("z1", "z", ids(GPUS, "node-1")[:2])]
    pending = [req("urgent", "b", 8, created_at=0, priority=100),
               req("mine", "a", 8, created_at=5, same_host=False)]
    d = fair.schedule(snap(GPUS, pending, running, now=NOW, reservations=(NOW_ON,)))
    assert "mine" in grants(d) and d.grants[0].lease_id == "mine"
    without = fair.schedule(snap(GPUS, pending, running, now=NOW))
    assert "mine" not in grants(without)  # the head would have held it back


def test_a_reservation_for_one_model_moves_other_teams_to_other_models() -> None:
    gpus = fleet(1, model=A100, prefix="a100") + fleet(1, start_id=101)
    a100 = booking(8, start=NOW - 1, end=NOW + 60, model="A100")
    d = fair.schedule(snap(gpus, [req("any", "b", 8)], now=NOW, reservations=(a100,)))
    assert grants(d)["any"].host == "node-0"  # the H100 host, not the reserved A100s
    d = fair.schedule(snap(gpus, [req("a100", "b", 2, model="A100")], now=NOW, reservations=(a100,)))
    assert "A100" in pendings(d)["a100"].reason and "reserved for team a" in pendings(d)["a100"].reason


@pytest.mark.parametrize("schedule", POLICIES)
def test_nothing_is_held_after_the_end(schedule) -> None:
    ended = booking(16, start=NOW - 7200, end=NOW)
    d = schedule(snap(GPUS, [req("all", "b", 16, same_host=False)], now=NOW, reservations=(ended,)))
    assert "all" in grants(d)


def test_two_reservations_on_the_same_gpus_add_up() -> None:
    two = (booking(4, start=NOW + 10, end=NOW + 20), booking(4, start=NOW + 30, end=NOW + 40, rid="r2"))
    d = fair.schedule(snap(GPUS, [req("b9", "b", 9, same_host=False)], now=NOW, reservations=two))
    assert not d.grants  # 16 - 9 < 4 + 4
    d = fair.schedule(snap(GPUS, [req("b8", "b", 8)], now=NOW, reservations=two))
    assert "b8" in grants(d)
