"""Fault scenario (issue 24, PostgreSQL HA): gpupool on a Patroni cluster under the storm load,
through a planned switchover and a lost primary.

The stack (web, two workers, beat) runs on a Patroni cluster of its own (tests/faults/patroni.py:
etcd, three members, `synchronous_mode`), reached by the libpq multi-host DATABASE_URL with
`target_session_attrs=read-write` a deployment would use. Under the load of the storm scenario:

1. `patronictl switchover` from the primary to its synchronous standby;
2. once the cluster is whole again, `kill -9` of the primary's node (its Patroni and its
   postmaster's process group): the leader key expires and the synchronous standby is promoted;
   the lost member is started again and rejoins as a replica (pg_rewind).

Per event: the seconds without a writable primary as a database client saw them, the API requests
that failed and whether every one was a JSON 503 with Retry-After (never an HTML page, a 500 or a
dropped connection), how soon a pass granted a new lease, and the cluster's own times. Over the
run: every lease a create acknowledged with 201 is in the database afterwards and every release
acknowledged with 200 stays done (synchronous replication: no acknowledged commit may be lost);
creates retried with their Idempotency-Key across the outages made one lease each; and every
invariant of the fault suite held, during the run and after it. Web and workers recover by
themselves: nothing is restarted.

Then the same loss of the primary without synchronous mode, its standbys a few seconds behind:
the commits they had not received are gone though clients were told they happened, and
`manage.py check_ledger` finds nothing wrong (the figures say how many).

`make test`: one switchover and one failover; `make faults` (GPUPOOL_FAULTS=full): three of each.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.events_check import check_events
from tests.faults.failover import (
    KeyedCreator,
    WriteProbe,
    acked_lost,
    failures,
    keyed_duplicates,
    probe_grant,
    stream_not_in_database,
)
from tests.faults.invariants import final_check
from tests.faults.patroni import PatroniCluster
from tests.faults.patroni_tools import missing_reason as patroni_missing
from tests.faults.scenario import FULL, begin, config, errors_outside, record_load, settle_and_check, users
from tests.faults.servers import missing_reason as stack_missing
from tests.faults.stack import Stack

CYCLES = 3 if FULL else 1
#: Under load between events, so each starts from a steady state.
BETWEEN_S = 20 if FULL else 4
#: A request in flight when an event begins fails with it: its window opens a little before.
IN_FLIGHT_S = 2.0
#: Failed requests are forgiven up to this long after a pass granted again.
SETTLE_MARGIN_S = 5.0
#: Without synchronous mode: how long the standbys receive nothing before the primary is lost.
STALL_S = 3

pytestmark = [pytest.mark.faults, pytest.mark.timeout(3600 if FULL else 600)]


@pytest.fixture(scope="module")
def ha(tmp_path_factory: Any) -> Iterator[tuple[Stack, PatroniCluster]]:
    reason = patroni_missing() or stack_missing()
    if reason:
        pytest.skip(f"PostgreSQL HA tier skipped: {reason}")
    cluster = PatroniCluster()
    stack = Stack(tmp_path_factory.mktemp("patroni-stack"), config(), users(), pg=cluster)
    try:
        stack.start()
        yield stack, cluster
    finally:
        stack.stop()


class Watch(threading.Thread):
    """The time.time() at which `predicate` first held (polled every 0.1 s, up to `timeout`)."""

    def __init__(self, predicate: Callable[[], Any], timeout: float = 120) -> None:
        super().__init__(daemon=True)
        self.predicate, self.timeout = predicate, timeout
        self.at: float | None = None
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.predicate():
                self.at = time.time()
                return
            time.sleep(0.1)

    def seconds_after(self, since: float) -> float | None:
        self.join(self.timeout)
        return round(self.at - since, 2) if self.at is not None else None


def switchover(stack: Stack, cluster: PatroniCluster, writer: WriteProbe) -> dict[str, Any]:
    """patronictl switchover to the synchronous standby (it returns once the new primary leads),
    then a probe lease: the times count from the command."""
    cluster.wait_healthy()
    since = time.time()
    old, new = cluster.switchover()
    moved = time.time()
    granted = probe_grant(stack, since)
    healthy = Watch(cluster.healthy)
    event = {"event": "switchover", "from": old, "to": new, "patronictl_s": round(moved - since, 2),
             "no_writable_primary_s": writer.gap(since, since + granted),
             "passes_resume_after_s": granted,
             "cluster_whole_again_after_s": healthy.seconds_after(since)}
    return {**event, "_window": (since - IN_FLIGHT_S, since + granted + SETTLE_MARGIN_S)}


def failover(stack: Stack, cluster: PatroniCluster, writer: WriteProbe) -> dict[str, Any]:
    """kill -9 of the primary's node; a probe lease asked for at once; the lost member rejoins."""
    cluster.wait_healthy()
    since = time.time()
    killed = cluster.kill_primary()
    elected = Watch(lambda: cluster.primary() not in (None, killed))
    granted = probe_grant(stack, since)
    promoted_after = elected.seconds_after(since)
    assert promoted_after is not None, f"no new primary after {killed} was killed"
    event = {"event": "kill -9 of the primary (Patroni and postmaster)", "killed": killed,
             "promoted": cluster.primary(), "new_primary_elected_after_s": promoted_after,
             "no_writable_primary_s": writer.gap(since, since + granted),
             "passes_resume_after_s": granted}
    window = (since - IN_FLIGHT_S, since + granted + SETTLE_MARGIN_S)
    event["rejoined_as_replica_after_s"] = round(cluster.rejoin(killed), 2)
    return {**event, "_window": window}


def test_switchover_and_failover_under_load_lose_no_acknowledged_write(ha: tuple[Stack, PatroniCluster],
                                                                       tmp_path: Path) -> None:
    stack, cluster = ha
    figures, sampler, load = begin(stack, "patroni_failover", tmp_path)
    figures_started = time.time()
    figures["cluster"] = (f"etcd + {len(cluster.members)} Patroni members, synchronous_mode, "
                          f"started in {cluster.started_s:.1f} s")
    writer, keyed = WriteProbe(stack.pg.url()), KeyedCreator(stack, "admin")
    writer.start()
    keyed.start()
    events: list[dict[str, Any]] = []
    try:
        for _ in range(CYCLES):
            time.sleep(BETWEEN_S)
            events.append(switchover(stack, cluster, writer))
            time.sleep(BETWEEN_S)
            events.append(failover(stack, cluster, writer))
        time.sleep(BETWEEN_S)
    except BaseException:
        load.abandon()  # no client left running after a failure
        sampler.stop()
        raise
    finally:
        keyed.stop()
        writer.stop()
    merged = load.finish()
    record_load(figures, merged)
    windows = [event.pop("_window") for event in events]
    for event, (since, until) in zip(events, windows, strict=True):
        event.update(failures(merged["errors"], since, until))
    figures["events"] = events
    outside = errors_outside(merged, windows)
    figures["failed_requests_outside_events"] = len(outside)
    lost = acked_lost(stack.pg.url(), merged["acked_creates"], merged["acked_releases"])
    # Seen by readers though never acknowledged to the writer: a commit waiting for the standby is
    # visible on the primary (the relay may publish it) and lost with it.
    figures["event_stream_transitions_not_in_database"] = len(
        stream_not_in_database(stack.redis.url(), stack.pg.url(), figures_started))
    figures["acknowledged_creates"] = len(merged["acked_creates"])
    figures["acknowledged_releases"] = len(merged["acked_releases"])
    figures["acknowledged_creates_lost"] = len(lost["creates_missing"])
    figures["acknowledged_releases_undone"] = len(lost["releases_undone"])
    duplicates = keyed_duplicates(stack.pg.url(), keyed.outcomes)
    figures["keyed_creates"] = len(keyed.outcomes)
    figures["keyed_creates_sent_again"] = sum(1 for *_, attempts in keyed.outcomes.values() if attempts > 1)
    # Sent again and answered 200 (a replay): an earlier attempt had committed though its client
    # saw a 503 or a dropped connection (the outcome of a COMMIT cut by the failover is unknown).
    figures["keyed_creates_committed_unseen"] = sum(1 for _, status, attempts in keyed.outcomes.values()
                                                    if attempts > 1 and status == 200)
    figures["keyed_creates_not_one_lease"] = len(duplicates)
    figures["keyed_creates_refused_or_unanswered"] = len(keyed.refused) + keyed.gave_up
    figures["faults_injected"] = f"{CYCLES} × (patronictl switchover, kill -9 of the primary's node + rejoin)"
    settle_and_check(stack, figures, sampler)
    assert not lost["creates_missing"] and not lost["releases_undone"], f"acknowledged writes lost: {lost}"
    assert not duplicates, f"a create retried with its Idempotency-Key made other than one lease: {duplicates[:5]}"
    assert not keyed.refused and not keyed.gave_up, (keyed.refused[:5], keyed.gave_up)
    assert merged["idempotency_mismatches"] == 0
    bad = [e for e in events if e["not_json_503_count"]]
    assert not bad, f"failures during an event that were not a JSON 503 with Retry-After: {bad}"
    assert not outside, f"failures outside the events: {outside[:10]}"


def test_asynchronous_replication_loses_the_last_commits_and_check_ledger_cannot_see_it(
        ha: tuple[Stack, PatroniCluster], tmp_path: Path) -> None:
    """What synchronous_mode is for. Switched off, the primary acknowledges commits its standbys
    have not received; here its WAL senders are stalled for STALL_S (standbys fallen behind), then
    the primary is lost: the standby promoted lacks the last commits, which clients were told
    had happened. The database stays consistent (each write is one transaction, replayed in
    order): `manage.py check_ledger` and every invariant hold, which is exactly why they cannot
    tell that anything was lost."""
    stack, cluster = ha
    cluster.configure(synchronous_mode=False, maximum_lag_on_failover=64 << 20)
    try:
        figures, sampler, load = begin(stack, "patroni_async_failover", tmp_path)
        try:
            time.sleep(BETWEEN_S)
            since = time.time()
            cluster.stall_replication()
            time.sleep(STALL_S)
            killed = cluster.kill_primary()
            granted = probe_grant(stack, since)
            rejoined = cluster.rejoin(killed)
            time.sleep(2)
        except BaseException:
            load.abandon()
            sampler.stop()
            raise
        merged = load.finish()
        sampler.stop()
        record_load(figures, merged)
        lost = acked_lost(stack.pg.url(), merged["acked_creates"], merged["acked_releases"])
        ledger = stack.manage("check_ledger").strip()
        findings = final_check(stack.pg.url())
        figures["faults_injected"] = (f"synchronous_mode off; WAL senders stalled {STALL_S} s, then kill -9 of the "
                                      "primary's node, rejoined with pg_rewind")
        figures["passes_resume_after_s"] = granted
        figures["rejoined_as_replica_after_s"] = round(rejoined, 2)
        for key, value in failures(merged["errors"], since - IN_FLIGHT_S, since + granted + SETTLE_MARGIN_S).items():
            figures[key] = value
        figures["acknowledged_creates"] = len(merged["acked_creates"])
        figures["acknowledged_creates_lost"] = len(lost["creates_missing"])
        figures["acknowledged_releases"] = len(merged["acked_releases"])
        figures["acknowledged_releases_undone"] = len(lost["releases_undone"])
        figures["lost_transitions_seen_in_event_stream"] = len(
            stream_not_in_database(stack.redis.url(), stack.pg.url(), since - BETWEEN_S))
        figures["check_ledger"] = ledger
        # The outbox check of the other scenarios: after the loss, stream and outbox disagree.
        figures["lease_events_check"] = check_events(stack.pg.url(), stack.redis_client())["findings"]
        figures["invariant_violations_sampled"] = len(sampler.violations)
        figures["invariant_findings_after"] = {k: len(v) for k, v in findings.items()}
        figures.write()
        assert lost["creates_missing"] or lost["releases_undone"], "nothing acknowledged was lost: no demonstration"
        assert ledger.startswith("ledger OK") and not findings and not sampler.violations
        assert not figures["not_json_503_count"], figures["not_json_503"]
    finally:
        cluster.configure(synchronous_mode=True, maximum_lag_on_failover=1 << 20)
        cluster.wait_healthy()
