"""Two real `celery beat` processes on the test database and Redis: exactly one sends; when the
leader is killed (kill -9) or frozen (SIGSTOP), the other takes over within the documented bound;
no entry is sent twice within its interval. What was sent is read from Redis itself: every beat
message names its sender (`origin`) and, since core.beat counts `expires` from the claim, when its
run was claimed."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings

from core import liveness
from core.beat import CHECK_S
from pool.celery import app
from stacktools.processes import Proc, beat_command
from stacktools.ready import wait_for
from tests.conftest import ARTIFACTS
from tests.support.processes import process_env

pytestmark = pytest.mark.django_db(transaction=True)

#: The entry whose runs are counted: the most frequent of the registry (every second).
PROBE_ENTRY = "relay-lease-events"
PROBE_TASK = "allocation.relay_lease_events"
INTERVAL_S = float(app.conf.beat_schedule[PROBE_ENTRY]["schedule"])
#: Takeover after a leader dies: the standby's next try (CHECK_S) plus a round trip, with room for
#: a busy 2-core machine.
KILL_TAKEOVER_BOUND_S = CHECK_S + 4.0
#: A frozen leader is cut off by the server after the lease.
LEASE_S = 3


class Sent:
    """The beat messages in Redis whose sender is one of the beats started here."""

    def __init__(self) -> None:
        self.client = redis.Redis.from_url(settings.REDIS_URL)
        self.origins: dict[str, str] = {}  # "gen<pid>@<host>" → the beat's name

    def watch(self, proc: Proc) -> None:
        self.origins[f"gen{proc.pid}@{socket.gethostname()}"] = proc.name

    def _scan(self) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
        for key in self.client.scan_iter("gpupool*"):
            if self.client.type(key) == b"list":
                for raw in self.client.lrange(key, 0, -1):
                    headers = json.loads(raw)["headers"]
                    if headers.get("origin") in self.origins:
                        yield key, raw, headers

    def runs(self, task: str = PROBE_TASK) -> list[tuple[float, str]]:
        """(when the run was claimed, epoch seconds; which beat sent it) of `task`, in order."""
        found = [(datetime.fromisoformat(h["expires"]).timestamp() - INTERVAL_S, self.origins[h["origin"]])
                 for _, _, h in self._scan() if h["task"] == task]
        return sorted(found)

    def senders(self) -> set[str]:
        return {self.origins[h["origin"]] for _, _, h in self._scan()}

    def clear(self) -> None:
        for key, raw, _ in list(self._scan()):
            self.client.lrem(key, 1, raw)


#: A beat has made up its mind once its log says one of these.
DECIDED = ("beat: leading", "beat: standing by")


def _decided(proc: Proc) -> bool:
    return any(text in proc.log_since_start() for text in DECIDED)


@pytest.fixture
def beats(tmp_path: Path) -> Iterator[Any]:
    """`start(name, **env)` starts a beat and waits until it leads or stands by; all are stopped,
    and their messages taken out of Redis, afterwards."""
    started: list[Proc] = []
    sent = Sent()

    def start(name: str, **env: str) -> Proc:
        proc = Proc(name, beat_command("INFO"), process_env(**env), tmp_path / f"{name}.log", _decided)
        started.append(proc)
        proc.start(timeout=60)
        sent.watch(proc)
        return proc

    try:
        yield start, sent
    finally:
        for proc in started:
            if proc.proc is not None:
                sent.watch(proc)  # also one that started but never made up its mind
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGCONT)  # a frozen one must be able to stop
            proc.stop()
        sent.clear()


def _assert_once_per_interval(runs: list[tuple[float, str]]) -> list[float]:
    """Consecutive runs are an interval apart (less Celery's 10 ms drift and the offset between
    two beats' estimates of the database clock, a few ms on one host). Returns the gaps."""
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(runs)]
    assert min(gaps) >= INTERVAL_S - 0.05, f"a run within {INTERVAL_S:g} s of the one before: {runs}"
    return gaps


def _record(name: str, figures: dict[str, Any]) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"beat_{name}.json").write_text(json.dumps(figures, indent=2))


def test_one_beat_sends_and_a_standby_takes_over_a_killed_leader(beats: Any, tmp_path: Path) -> None:
    start, sent = beats
    leader = start("beat-a")
    standby = start("beat-b", GPUPOOL_ALIVE_FILE=str(tmp_path / "alive-b"))
    wait_for(lambda: len(sent.runs()) >= 4, 30, "four runs sent")
    assert sent.senders() == {"beat-a"}, "the second beat sends too"
    assert "beat: standing by" in standby.log_since_start()
    standby_alive = liveness.heartbeat_age(tmp_path / "alive-b")
    assert standby_alive is not None and standby_alive < 3 * CHECK_S  # a standby's loop turns too

    killed_at = time.time()
    leader.kill9()
    wait_for(lambda: sum(1 for _, who in sent.runs() if who == "beat-b") >= 3, 30, "three runs sent by the standby")

    runs = sent.runs()
    takeover_s = next(t for t, who in runs if who == "beat-b") - killed_at
    assert [who for _, who in runs] == sorted(who for _, who in runs), "the two beats' runs interleave"
    assert all(t <= killed_at for t, who in runs if who == "beat-a")
    assert "beat: leading" in standby.log_since_start()
    gaps = _assert_once_per_interval(runs)
    # The first run after the kill was due at the leader's last run + the interval; how much later
    # it came is the takeover's cost.
    assert takeover_s <= KILL_TAKEOVER_BOUND_S, f"took over {takeover_s:.1f} s after the kill"
    _record("takeover_kill9", {"takeover_s": round(takeover_s, 3), "bound_s": KILL_TAKEOVER_BOUND_S,
                               "longest_gap_s": round(max(gaps), 3), "runs": len(runs)})


def test_a_frozen_leader_is_cut_off_after_the_lease_and_sends_nothing_when_it_wakes(beats: Any) -> None:
    start, sent = beats
    leader = start("beat-a", GPUPOOL_BEAT_LEASE_S=str(LEASE_S))
    start("beat-b", GPUPOOL_BEAT_LEASE_S=str(LEASE_S))
    wait_for(lambda: len(sent.runs()) >= 3, 30, "three runs sent")
    assert sent.senders() == {"beat-a"}, "the second beat sends too"

    os.killpg(leader.pid, signal.SIGSTOP)  # a hung process, or a node cut off: it says nothing more
    frozen_at = time.time()
    wait_for(lambda: any(who == "beat-b" for _, who in sent.runs()), 30, "a run sent by the standby")
    takeover_s = next(t for t, who in sent.runs() if who == "beat-b") - frozen_at

    os.killpg(leader.pid, signal.SIGCONT)
    wait_for(lambda: "lost the lead" in leader.log_since_start(), 20, "the old leader to find it lost the lead")
    woke_at = time.time()
    wait_for(lambda: sum(1 for t, who in sent.runs() if who == "beat-b" and t > woke_at) >= 2, 20,
             "two more runs from the new leader")

    runs = sent.runs()
    assert all(t <= frozen_at for t, who in runs if who == "beat-a"), "the old leader sent after it froze"
    _assert_once_per_interval(runs)
    # The server ends the frozen session after the lease; the standby tries every CHECK_S.
    assert takeover_s <= LEASE_S + CHECK_S + 4.0, f"took over {takeover_s:.1f} s after the freeze"
    _record("takeover_frozen", {"lease_s": LEASE_S, "takeover_s": round(takeover_s, 3), "runs": len(runs)})
