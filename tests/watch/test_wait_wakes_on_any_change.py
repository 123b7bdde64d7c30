"""A long poll with `seen=ETAG` answers as soon as anything a waiting user sees changes, not only
the state: a pending lease moving up the queue (a new queue position and reason, no transition)
wakes it at once, through the pass's `events.announce_explained`, well before its 5 s re-read."""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests

pytestmark = [pytest.mark.slow]


@pytest.fixture
def alice(web: str, transactional_db: Any, demo_fleet: Any, make_user: Any) -> requests.Session:
    from tests.support.tokens import api_key

    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {api_key(make_user('alice', teams=('vision',)))}"
    return session


def _create(session: requests.Session, url: str, gpus: int) -> dict[str, Any]:
    answer = session.post(url + "leases/", json={"pool": "training", "gpus": gpus, "same_host": gpus <= 8})
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_a_move_up_the_queue_wakes_a_long_poll_that_names_the_etag_it_saw(web: str, alice: requests.Session) -> None:
    from allocation.engine import run_pass

    _create(alice, web, 24)  # vision at its limit (24): what it asks next waits
    run_pass()
    ahead, behind = _create(alice, web, 8), _create(alice, web, 8)
    run_pass()
    first = alice.get(f"{web}leases/{behind['id']}/")
    etag = first.headers["ETag"].strip('"')
    assert first.json()["queue_position"] == 2 and etag

    # Nothing changed: the long poll holds (and answers the same ETag at its timeout).
    started = time.monotonic()
    same = alice.get(f"{web}leases/{behind['id']}/", params={"wait": "1.5", "seen": etag}, timeout=30)
    assert time.monotonic() - started >= 1.4 and same.headers["ETag"].strip('"') == etag

    # The lease ahead is cancelled; the next pass moves this one up: still pending, a new position.
    import threading

    answers: list[tuple[float, requests.Response]] = []

    def wait() -> None:
        began = time.monotonic()
        answer = alice.get(f"{web}leases/{behind['id']}/", params={"wait": "30", "state": "pending", "seen": etag},
                           timeout=40)
        answers.append((time.monotonic() - began, answer))

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(1.0)  # the poll is waiting
    alice.post(f"{web}leases/{ahead['id']}/release/", json={"reason": "not needed"})
    moved = time.monotonic()
    run_pass()
    waiter.join(timeout=40)
    (elapsed, answer), = answers
    assert answer.status_code == 200
    body = answer.json()
    assert body["state"] == "pending" and body["queue_position"] == 1
    assert answer.headers["ETag"].strip('"') != etag
    # Woken by the pass's announcement, not by the poll's own re-read every 5 s.
    assert time.monotonic() - moved < 3.0, f"answered {time.monotonic() - moved:.1f} s after the pass"
    assert elapsed < 30


def test_without_seen_a_long_poll_still_waits_for_a_change_of_state_only(web: str, alice: requests.Session) -> None:
    from allocation.engine import run_pass

    _create(alice, web, 24)
    run_pass()
    ahead, behind = _create(alice, web, 8), _create(alice, web, 8)
    run_pass()
    alice.post(f"{web}leases/{ahead['id']}/release/", json={})
    run_pass()  # a new queue position, the same state
    started = time.monotonic()
    answer = alice.get(f"{web}leases/{behind['id']}/", params={"wait": "2", "state": "pending"}, timeout=30)
    assert time.monotonic() - started >= 1.9 and answer.json()["queue_position"] == 1
