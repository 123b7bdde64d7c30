"""The outbox of lease events: every transition writes its event in its own transaction; the relay
publishes each one to the stream once, under one stream id, in order, whatever fails on the way
(a publish that raises, a relay that dies between the stream write and its record, two relays at
once, a transaction that commits late)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection, transaction

import allocation.outbox as outbox
from allocation.events import PUBLISHED, STREAM, LeaseChange
from allocation.models import LeaseOutbox
from allocation.notify.dispatch import notifications_dispatch
from allocation.outbox import announce, prune, relay, relay_after_write
from allocation.watch.feed import parse_event_id

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def stream(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A clean stream (and Redis' record of published rows) for each test; writers not quiet."""
    monkeypatch.setattr(outbox, "_quiet_until", 0.0)
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(STREAM, PUBLISHED)
    yield client
    client.delete(STREAM, PUBLISHED)


def entries(client: Any) -> list[tuple[str, dict[str, str]]]:
    return [(i.decode(), {k.decode(): v.decode() for k, v in f.items()}) for i, f in client.xrange(STREAM)]


def _change(n: int, state: str = "pending") -> LeaseChange:
    return LeaseChange(f"00000000-0000-0000-0000-{n:012d}", 1, 1, state)


def test_a_transition_whose_publish_fails_reaches_the_stream_through_the_relay_exactly_once(
        demo_fleet: Any, make_user: Any, stream: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from allocation.services.leases import lease_create

    def redis_down(rows: Any) -> list[str]:
        raise redis.ConnectionError("Redis is down")

    real_publish = outbox.publish_rows
    monkeypatch.setattr(outbox, "publish_rows", redis_down)
    lease = lease_create(user=make_user("alice", teams=("vision",)), pool="training", gpus=1)[0]
    [row] = LeaseOutbox.objects.all()
    assert row.stream_id is None and str(row.lease_id) == str(lease.pk) and row.state == "pending"
    assert entries(stream) == []  # the publish after the commit failed: nothing sent, nothing lost
    assert outbox._quiet_until > 0  # and the next writers leave it to the relay for a moment
    monkeypatch.setattr(outbox, "publish_rows", real_publish)

    assert relay() == 1
    [(stream_id, fields)] = entries(stream)
    assert fields == {"lease": str(lease.pk), "pool": str(lease.pool_id), "team": str(lease.team_id),
                      "state": "pending", "event": str(row.pk)}
    row.refresh_from_db()
    assert row.stream_id == stream_id and row.published_at is not None
    assert relay() == 0 and len(entries(stream)) == 1  # a second run publishes nothing again


def test_a_relay_that_dies_after_the_stream_write_is_retried_under_the_same_stream_id(
        stream: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbox, "_publish_now", lambda: None)  # no publish after the commit
    with transaction.atomic():
        announce([_change(1), _change(2)])
    assert entries(stream) == []
    real_mark = outbox.bulk_update_columns

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit("killed between XADD and the record of it")

    monkeypatch.setattr(outbox, "bulk_update_columns", crash)
    with pytest.raises(SystemExit):
        relay()
    first = entries(stream)
    assert len(first) == 2 and LeaseOutbox.objects.filter(stream_id__isnull=True).count() == 2
    monkeypatch.setattr(outbox, "bulk_update_columns", real_mark)

    assert relay() == 2
    assert entries(stream) == first  # no second entry: the same ids, recorded now
    assert [r.stream_id for r in LeaseOutbox.objects.order_by("id")] == [i for i, _ in first]
    assert stream.hlen(PUBLISHED) == 0  # Redis forgets them once the record is committed


def test_two_relays_at_once_publish_every_row_once_in_id_order(stream: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbox, "_publish_now", lambda: None)
    for batch in range(10):
        with transaction.atomic():
            announce([_change(batch * 50 + n) for n in range(50)])
    counts: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            counts.append(relay_after_write(limit=40, rounds=100))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and sum(counts) == 500
    published = entries(stream)
    assert len(published) == 500
    outbox_ids = [int(fields["event"]) for _, fields in published]
    assert outbox_ids == sorted(set(outbox_ids))  # each once, in id order
    rows = dict(LeaseOutbox.objects.values_list("id", "stream_id"))
    assert all(rows[int(fields["event"])] == stream_id for stream_id, fields in published)


def test_concurrent_writers_never_wait_on_each_other_and_leave_nothing_unpublished(stream: Any) -> None:
    """Each writer publishes after its commit without waiting for the relay another holds: the
    holder looks again after its commit, so no row waits for the periodic relay."""
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for n in range(40):
                with transaction.atomic():  # announce publishes once this commits
                    announce([_change(w * 1000 + n)])
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert not LeaseOutbox.objects.filter(stream_id__isnull=True).exists()  # no periodic relay ran
    outbox_ids = [int(fields["event"]) for _, fields in entries(stream)]
    assert len(outbox_ids) == 240 and len(set(outbox_ids)) == 240


def test_a_transaction_that_commits_late_is_published_after_what_was_published_meanwhile(
        stream: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its row has the smaller id but comes later: a watcher resuming from the id it last saw
    must still get it, so it is published after, with a greater stream id."""
    written, release = threading.Event(), threading.Event()

    def slow_writer() -> None:
        try:
            with transaction.atomic():
                announce([_change(1, "granted")])
                written.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=slow_writer)
    thread.start()
    assert written.wait(30)
    with transaction.atomic():
        announce([_change(2, "granted")])  # a greater id, committed first, published at once
    [(bookmark, first)] = entries(stream)
    assert first["lease"].endswith("000000000002")
    release.set()
    thread.join(30)  # its own publish after the commit
    relay()
    published = entries(stream)
    assert [f["lease"][-1] for _, f in published] == ["2", "1"]
    assert parse_event_id(published[1][0]) > parse_event_id(bookmark)
    assert LeaseOutbox.objects.filter(stream_id__isnull=True).count() == 0


def test_a_rolled_back_transition_leaves_no_event(stream: Any) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        announce([_change(1)])
        raise RuntimeError("the transition failed")
    assert LeaseOutbox.objects.count() == 0 and relay() == 0 and entries(stream) == []


def test_published_rows_are_pruned_after_the_retention(stream: Any) -> None:
    from datetime import timedelta

    from django.utils import timezone

    with transaction.atomic():
        announce([_change(1), _change(2), _change(3)])
    assert LeaseOutbox.objects.filter(stream_id__isnull=True).count() == 0
    LeaseOutbox.objects.filter(pk=LeaseOutbox.objects.order_by("id")[0].pk).update(
        published_at=timezone.now() - timedelta(days=2))
    LeaseOutbox.objects.create(lease_id=_change(4).lease_id, pool_id=1, team_id=1, state="pending")  # unpublished
    notifications_dispatch()  # a row is pruned once notified too (tests/allocation/test_notify_cursor.py)
    assert prune() == 1
    assert LeaseOutbox.objects.count() == 3


_KILLED = '''
import os, signal, sys
import django
django.setup()
from django.db import transaction
import allocation.outbox as outbox
from allocation.events import LeaseChange

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if sys.argv[1] == "after-commit":  # the transaction commits; the process dies before publishing
    outbox._publish_now = die
    with transaction.atomic():
        outbox.announce([LeaseChange(f"00000000-0000-0000-0000-{n:012d}", 1, 1, "granted") for n in range(3)])
else:  # a relay dies after its stream write, before the rows are marked
    outbox.bulk_update_columns = die
    outbox.relay()
'''


def test_kill_9_after_the_commit_and_after_the_stream_write_loses_nothing_and_duplicates_nothing(
        stream: Any) -> None:
    import signal
    import subprocess
    import sys

    from tests.support.processes import process_env

    def killed(mode: str) -> None:
        done = subprocess.run([sys.executable, "-c", _KILLED, mode], env=process_env(), timeout=60,
                              capture_output=True, text=True)
        assert done.returncode == -signal.SIGKILL, done.stderr

    killed("after-commit")
    assert LeaseOutbox.objects.filter(stream_id__isnull=True).count() == 3 and entries(stream) == []
    killed("after-xadd")
    sent = entries(stream)
    assert len(sent) == 3 and LeaseOutbox.objects.filter(stream_id__isnull=True).count() == 3
    # The dead relay's lock and transaction go with its connection, once its server process has
    # seen the socket close (on a busy machine, not at once: until then the lock is held).
    published, deadline = 0, time.monotonic() + 30
    while published < 3 and time.monotonic() < deadline:
        published += relay()
        time.sleep(0.05)
    assert published == 3
    assert entries(stream) == sent  # the same three entries, no second copy
    assert sorted(str(i) for i in LeaseOutbox.objects.values_list("stream_id", flat=True)) == [i for i, _ in sent]
