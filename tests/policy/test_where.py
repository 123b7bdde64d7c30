"""Where a lease may run (allocation.policy.where): workload kinds, placement domains and
selectors, judged by both policies like model or memory."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocation.policy.fair import schedule as fair
from allocation.policy.fifo import schedule as fifo
from allocation.policy.gates import GateContext, Refusal, admit
from allocation.policy.state import build_pass
from allocation.policy.types import Decisions, RequestView, Snapshot
from allocation.policy.where import Selector, selector_of, selector_problems, tags_of
from tests.policy.factories import fleet, grants, pendings, req, snap

POLICIES = pytest.mark.parametrize("policy", [fair, fifo], ids=["fair", "fifo"])
KB = selector_of({"source": "kb"}).tag
# Two SSH hosts of 8, and two clusters with one node of 8 each.
VMS = fleet(2, prefix="vm", workloads=frozenset({"process"}), domain="ssh")
KA = fleet(1, prefix="ka/node", start_id=17, workloads=frozenset({"pod"}), domain="kubernetes:ka")
KBN = fleet(1, prefix="kb/node", start_id=25, workloads=frozenset({"pod"}), domain="kubernetes:kb",
            tags=frozenset({KB}))
MIXED = VMS + KA + KBN


def _refusal(snapshot: Snapshot, request: RequestView) -> Refusal | None:
    state = build_pass(snapshot, {request.pool})
    groups = state.pool(request.pool).index.groups_for(request)
    return admit(request, groups, GateContext.of(state, request.pool))


@POLICIES
def test_a_lease_goes_only_to_hosts_that_can_start_its_workload(policy: Callable[[Snapshot], Decisions]) -> None:
    pending = [req("proc", "a", 8, workload="process"), req("pod", "a", 8, workload="pod", created_at=1),
               req("any", "a", 8, created_at=2)]
    decided = grants(policy(snap(MIXED, pending)))
    assert {decided["proc"].host} <= {"vm-0", "vm-1"}
    assert decided["pod"].host in ("ka/node-0", "kb/node-0")
    assert set(decided) == {"proc", "pod", "any"}


@POLICIES
def test_a_spread_lease_stays_in_one_domain(policy: Callable[[Snapshot], Decisions]) -> None:
    decided = grants(policy(snap(MIXED, [req("big", "a", 16, same_host=False, workload="pod")])))
    assert decided == {}  # 8 in each cluster: never 16 in one
    refusal = _refusal(snap(MIXED), req("big", "a", 16, same_host=False, workload="pod"))
    assert refusal is not None and refusal.code == "too_big" and refusal.unsatisfiable
    assert "within one cluster or SSH domain" in refusal.message
    spread = grants(policy(snap(MIXED, [req("vms", "a", 16, same_host=False)])))
    assert {spread["vms"].host} <= {"vm-0", "vm-1"}  # 16 fit only in the SSH domain


def test_a_workload_no_host_starts_is_refused_for_good_with_the_reason() -> None:
    refusal = _refusal(snap(VMS), req("r", "a", 1, workload="pod"))
    assert refusal == Refusal("no_match", "no host in pool p can start a pod (no source of the pool runs one)", True)


@POLICIES
def test_a_selector_tag_keeps_a_lease_on_the_hosts_it_selects(policy: Callable[[Snapshot], Decisions]) -> None:
    decided = grants(policy(snap(MIXED, [req("r", "a", 4, workload="pod", selector=KB)])))
    assert decided["r"].host == "kb/node-0"
    waiting = policy(snap(MIXED, [req("r", "a", 4, workload="pod", selector=KB),
                                  req("s", "a", 8, workload="pod", selector=KB, created_at=1)]))
    assert "on hosts matching source=kb" in pendings(waiting)["s"].reason
    refusal = _refusal(snap(VMS), req("r", "a", 1, selector=KB))
    assert refusal is not None and refusal.message == "no host in pool p matches the selector source=kb"


def test_selectors_match_source_host_and_every_label() -> None:
    chosen = selector_of({"source": ["kb", "ka"], "host": "n1", "labels": {"zone": "a", "gpu": "h100"}})
    assert chosen.tag == "source=ka,kb host=n1 gpu=h100 zone=a"
    assert chosen.matches("ka", "n1", {"zone": "a", "gpu": "h100", "x": "y"})
    assert not chosen.matches("kc", "n1", {"zone": "a", "gpu": "h100"})
    assert not chosen.matches("ka", "n2", {"zone": "a", "gpu": "h100"})
    assert not chosen.matches("ka", "n1", {"zone": "a"})
    assert selector_of({}) == Selector() and Selector().tag == "" and Selector().matches("s", "h", None)
    assert tags_of([chosen, selector_of({"source": "ka"})], "ka", "n2", {}) == frozenset({"source=ka"})


def test_bad_selectors_say_what_is_wrong() -> None:
    assert selector_problems({"source": "ka", "host": "h", "labels": {"k": "v"}}) == []
    assert selector_problems({"zone": "a"}) == ["unknown key 'zone' (known: source, host, labels)"]
    assert selector_problems({"source": []})[0].startswith("'source' must be")
    assert selector_problems({"labels": {"k": 1}})[0].startswith("'labels' must")
    assert selector_problems("ka")[0].startswith("must be an object")


# A loaded machine (the suite beside other work) draws text slowly; the check is not about speed.
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["source", "host", "labels"]),
                       st.one_of(st.text(min_size=1, max_size=5), st.lists(st.text(min_size=1, max_size=3), max_size=2),
                                 st.dictionaries(st.text(min_size=1, max_size=3), st.text(max_size=3), max_size=2))))
def test_equal_selectors_share_a_tag_and_a_valid_one_selects_what_it_says(data: dict) -> None:
    if selector_problems(data):
        return
    chosen = selector_of(data)
    assert selector_of(dict(reversed(list(data.items())))).tag == chosen.tag
    labels = dict(chosen.labels)
    source = chosen.sources[0] if chosen.sources else "any"
    assert chosen.matches(source, chosen.host or "any", labels)
