"""Admission at creation (allocation.policy.admission): the pass's own rules, asked of a pool's
capacity profile. Pure, no database; the API's answers are in tests/api (leases, reservations)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from allocation.policy import gates
from allocation.policy.admission import ProfileRow, admit_lease, admit_reservation, peak, profile_groups
from allocation.policy.gates import Refusal
from allocation.policy.placement import capacity_bound
from allocation.policy.types import RequestView, ReservationView

# Two kinds: whole A100s (8 per host, 16 in all) and A100 MIG slices (14 per host, 28), and 4 H100s.
PROFILE: list[ProfileRow] = [("NVIDIA A100 80GB", "", 81920, 8, 16), ("NVIDIA A100 80GB", "1g.10gb", 9984, 14, 28),
                             ("NVIDIA H100", "", 40960, 4, 4)]
H = 3600.0


def _lease(gpus: int, model: str = "", same_host: bool = True, memory: int = 0) -> RequestView:
    return RequestView("", "a", "p", gpus, model=model, min_memory_mb=memory, same_host=same_host)


def _res(gpus: int, start: float = 0, end: float = 2 * H, team: str = "a", model: str = "",
         rid: str = "") -> ReservationView:
    return ReservationView(rid, team, "p", gpus, start, end, model)


def _admit(new: ReservationView, others: Sequence[ReservationView] = (), limit: int | None = None) -> Refusal | None:
    return admit_reservation(new, PROFILE, lambda: others, lambda: limit)


def test_the_profile_matches_as_the_pass_does() -> None:
    assert [g.kinds for g in profile_groups(PROFILE, "a100")] == [(0,)]  # a MIG slice only when asked
    assert [g.kinds for g in profile_groups(PROFILE, "a100 mig")] == [(1,)]
    assert [g.kinds for g in profile_groups(PROFILE, "A100|H100")] == [(0,), (2,)]
    assert [g.kinds for g in profile_groups(PROFILE, "", 40000)] == [(0,), (2,)]
    assert profile_groups(PROFILE, "b200") == ()
    bounds = [(g.capacity_block, g.capacity_total) for g in profile_groups(PROFILE, "a100|h100")]
    assert bounds == [(8, 16), (4, 4)]
    assert capacity_bound(profile_groups(PROFILE, "a100|h100"), True) == 8


def test_the_limit_rule_is_the_gates() -> None:
    assert not gates.exceeds_limit(8, 8) and gates.exceeds_limit(9, 8)
    assert gates.exceeds_limit(3, 8, holds=6) and not gates.exceeds_limit(2, 8, holds=6)


def test_a_lease_above_its_teams_limit_is_refused_naming_the_team() -> None:
    assert admit_lease(_lease(9, same_host=False), 8, PROFILE) == Refusal(
        "over_limit", "team a may hold at most 8 GPUs in pool p; asked for 9", unsatisfiable=True)
    assert admit_lease(_lease(8), 8, PROFILE) is None
    assert admit_lease(_lease(1), 0, PROFILE) is not None  # a limit of 0 is a limit


@pytest.mark.parametrize(("lease", "message"), [
    (_lease(9), "pool p has at most 8 GPUs on one host; 9 can never be granted"),
    (_lease(17, same_host=False), "pool p has at most 16 GPUs in total; 17 can never be granted"),
    (_lease(5, "h100"), "pool p has at most 4 GPUs of model h100 on one host; 5 can never be granted"),
    (_lease(1, "b200"), "pool p has at most 0 GPUs of model b200 on one host; 1 can never be granted"),
    (_lease(1, "a100", memory=100000),
     "pool p has at most 0 GPUs of model a100 with ≥ 100000 MB on one host; 1 can never be granted"),
])
def test_a_lease_larger_than_any_capacity_is_unsatisfiable(lease: RequestView, message: str) -> None:
    assert admit_lease(lease, None, PROFILE) == Refusal("unsatisfiable", message, unsatisfiable=True)


def test_a_lease_the_pool_could_serve_passes() -> None:
    assert admit_lease(_lease(8), None, PROFILE) is None
    assert admit_lease(_lease(16, same_host=False), None, PROFILE) is None
    assert admit_lease(_lease(14, "1g.10gb"), None, PROFILE) is None


def test_the_peak_counts_only_what_overlaps_at_one_moment() -> None:
    windows = [_res(4, 0, H), _res(5, H, 2 * H), _res(3, 0.5 * H, 1.5 * H)]
    assert peak(windows, 0, 2 * H) == 8  # 4 + 3 at first, 5 + 3 after the first ends
    assert peak(windows, 1.5 * H, 2 * H) == 5
    assert peak([], 0, H) == 0


def test_a_reservation_needs_a_gpu_of_its_model() -> None:
    assert _admit(_res(1, model="b200")) == Refusal("no_match", "no GPU of model 'b200' in pool p", True)


def test_overlapping_reservations_on_the_same_kinds_take_capacity() -> None:
    others = [_res(10, team="b", model="a100", rid="1"), _res(4, team="b", model="h100", rid="2")]
    refusal = _admit(_res(8, H, 3 * H, model="a100"), others)
    assert refusal == Refusal("insufficient_capacity", "pool p has 16 GPUs of model a100; other reservations "
                              "hold up to 10 of them in that window, so 8 more cannot be reserved (at most 6)")
    assert _admit(_res(6, H, 3 * H, model="a100"), others) is None  # the H100s are not its kinds


def test_the_teams_limit_counts_its_own_overlapping_reservations() -> None:
    others = [_res(8, model="a100", rid="1"), _res(4, team="b", model="h100", rid="2")]
    refusal = _admit(_res(5, H, 3 * H, model="a100"), others, limit=12)
    assert refusal == Refusal("over_limit", "team a may hold at most 12 GPUs in pool p; its reservations "
                              "already hold up to 8 in that window, so 5 more cannot be reserved")
    assert _admit(_res(4, H, 3 * H, model="a100"), others, limit=12) is None
    assert _admit(_res(5, H, 3 * H, model="a100"), others) is None  # no limit


def test_rows_are_read_only_as_far_as_the_rules_get() -> None:
    read: list[str] = []

    def others() -> list[ReservationView]:
        read.append("others")
        return []

    def limit() -> int | None:
        read.append("limit")
        return None

    admit_reservation(_res(1, model="b200"), PROFILE, others, limit)
    assert read == []
    admit_reservation(_res(99), PROFILE, others, limit)
    assert read == ["others"]
    admit_reservation(_res(1), PROFILE, others, limit)
    assert read == ["others", "others", "limit"]
