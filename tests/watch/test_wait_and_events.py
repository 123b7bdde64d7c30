"""Waiting without polling, through the production web server (gunicorn + uvicorn on pool.asgi):
the long poll `GET leases/{id}/?wait=` and the Server-Sent Events stream `GET leases/events/`,
fed by the Redis stream of committed changes."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pytest
import requests

pytestmark = [pytest.mark.slow]


@pytest.fixture
def fleet(transactional_db: Any, demo_fleet: Any, make_user: Any) -> dict[str, Any]:
    from tests.support.tokens import api_key

    alice = make_user("alice", teams=("vision",))
    carol = make_user("carol", teams=("nlp",))
    return {"alice": api_key(alice), "carol": api_key(carol)}


@pytest.fixture
def server(web: str, fleet: dict[str, Any]) -> dict[str, Any]:
    return {"url": web, **fleet}


def _session(token: str) -> requests.Session:
    s = requests.Session()
    s.headers["Authorization"] = f"Token {token}"
    return s


def _create(srv: dict[str, Any], gpus: int = 1, token: str | None = None) -> dict[str, Any]:
    r = _session(token or srv["alice"]).post(srv["url"] + "leases/", json={"pool": "training", "gpus": gpus})
    assert r.status_code == 201, r.text
    return r.json()


def _pass() -> None:
    from allocation.engine import run_pass

    run_pass()


def _in_background(fn: Any, *args: Any) -> queue.Queue[Any]:
    out: queue.Queue[Any] = queue.Queue()
    threading.Thread(target=lambda: out.put(fn(*args)), daemon=True).start()
    return out


def _timed_get(session: requests.Session, url: str) -> tuple[float, requests.Response]:
    started = time.monotonic()
    response = session.get(url, timeout=70)
    return time.monotonic() - started, response


def test_a_long_poll_answers_when_a_pass_grants_the_lease_not_at_its_timeout(server: dict[str, Any]) -> None:
    lease = _create(server)
    answer = _in_background(_timed_get, _session(server["alice"]), f"{server['url']}leases/{lease['id']}/?wait=40")
    time.sleep(1.0)  # the client is waiting on a pending lease
    assert answer.empty()
    _pass()
    elapsed, response = answer.get(timeout=45)
    assert response.status_code == 200
    body = response.json()
    assert body["state"] == "granted" and len(body["gpus"]) == 1
    assert elapsed < 30, "the long poll should answer on the grant, well before its 40 s timeout"


def test_a_long_poll_answers_at_once_when_the_state_already_differs_from_the_one_named(
        server: dict[str, Any]) -> None:
    lease = _create(server)
    elapsed, response = _timed_get(_session(server["alice"]),
                                   f"{server['url']}leases/{lease['id']}/?wait=40&state=granted")
    assert response.status_code == 200 and response.json()["state"] == "pending"
    assert elapsed < 30


def test_a_long_poll_with_nothing_changing_answers_the_unchanged_lease_at_its_timeout(
        server: dict[str, Any]) -> None:
    lease = _create(server)
    elapsed, response = _timed_get(_session(server["alice"]), f"{server['url']}leases/{lease['id']}/?wait=1.5")
    assert response.status_code == 200 and response.json()["state"] == "pending"
    assert elapsed >= 1.4


def test_waiting_refuses_bad_input_and_other_teams_leases_with_json_errors(server: dict[str, Any]) -> None:
    lease = _create(server)
    alice, carol = _session(server["alice"]), _session(server["carol"])
    url = f"{server['url']}leases/{lease['id']}/"
    bad = alice.get(url + "?wait=soon")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_wait"
    assert requests.get(url + "?wait=1").status_code == 401
    other = carol.get(url + "?wait=1")
    assert other.status_code == 404 and other.json()["code"] == "not_found"
    assert alice.get(f"{server['url']}leases/not-a-uuid/?wait=1").status_code == 404
    assert alice.post(url + "?wait=1").status_code in (405, 404)  # writes never reach the waiter
    events = alice.get(f"{server['url']}leases/events/?since=yesterday")
    assert events.status_code == 400 and events.json()["code"] == "invalid_event_id"
    assert alice.get(f"{server['url']}leases/events/?team=nlp").json()["code"] == "not_a_member"
    assert alice.get(f"{server['url']}leases/events/?pool=nowhere").status_code == 404


class Stream:
    """An SSE client on a thread: events land on a queue as dicts (id, event, data)."""

    def __init__(self, session: requests.Session, url: str, headers: dict[str, str] | None = None) -> None:
        self.events: queue.Queue[dict[str, str]] = queue.Queue()
        self.response = session.get(url, stream=True, timeout=30, headers=headers or {})
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        event: dict[str, str] = {}
        try:
            for line in self.response.iter_lines(decode_unicode=True):
                if line == "":
                    if "event" in event:
                        self.events.put(event)
                    event = {}
                elif not line.startswith(":"):
                    key, _, value = line.partition(": ")
                    event[key] = value
        except (requests.RequestException, AttributeError):
            pass

    def take(self, n: int, *, kind: str = "lease", timeout: float = 20) -> list[dict[str, Any]]:
        import json

        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            event = self.events.get(timeout=max(0.1, deadline - time.monotonic()))
            if event["event"] == kind:
                out.append({**event, "lease": json.loads(event["data"]) if kind == "lease" else None})
        return out

    def close(self) -> None:
        self.response.close()


def test_the_stream_carries_each_change_of_a_teams_leases_in_order_with_resumable_ids(
        server: dict[str, Any]) -> None:
    alice = _session(server["alice"])
    stream = Stream(alice, server["url"] + "leases/events/?team=vision&pool=training")
    bookmark = stream.take(1, kind="bookmark")[0]["id"]
    _create(server, token=server["carol"])  # another team: not on this stream
    lease = _create(server)
    _pass()
    alice.post(f"{server['url']}leases/{lease['id']}/release/")
    events = stream.take(3)
    stream.close()
    assert [e["lease"]["id"] for e in events] == [lease["id"]] * 3
    assert [e["lease"]["team"] for e in events] == ["vision"] * 3
    ids = [e["id"] for e in events]
    assert len(set(ids)) == 3
    # Each event says the transition it announces, however late it is rendered.
    assert [e["lease"]["state"] for e in events] == ["pending", "granted", "released"]

    # Resuming from the bookmark replays the same three changes (Last-Event-ID, as EventSource does).
    again = Stream(alice, server["url"] + "leases/events/?team=vision", headers={"Last-Event-ID": bookmark})
    replay = again.take(3)
    again.close()
    assert [e["id"] for e in replay] == ids
    # A replay shows each transition in turn (the stream keeps the state committed), not the lease's
    # state now, three times over.
    assert [e["lease"]["state"] for e in replay] == ["pending", "granted", "released"]
    assert replay[0]["lease"]["gpus"] == events[-1]["lease"]["gpus"]  # the rest is the lease as it is
    # Resuming from the last id replays nothing: the next change is the first event.
    later = Stream(alice, server["url"] + f"leases/events/?team=vision&since={ids[-1]}")
    assert later.take(1, kind="bookmark")[0]["id"] == ids[-1]
    second = _create(server)
    first_event = later.take(1)[0]
    later.close()
    assert first_event["lease"]["id"] == second["id"] and first_event["lease"]["state"] == "pending"


def test_a_resume_point_older_than_the_kept_changes_is_a_410(server: dict[str, Any]) -> None:
    import redis
    from django.conf import settings

    from allocation.events import STREAM

    client = redis.Redis.from_url(settings.REDIS_URL)
    added = client.xadd(STREAM, {"lease": "00000000-0000-0000-0000-000000000000", "pool": "0", "team": "0",
                                 "state": "pending"})
    first = added.decode() if isinstance(added, bytes) else added
    client.xadd(STREAM, {"lease": "00000000-0000-0000-0000-000000000000", "pool": "0", "team": "0",
                         "state": "released"})
    client.xtrim(STREAM, maxlen=1, approximate=False)
    response = _session(server["alice"]).get(f"{server['url']}leases/events/?since={first}&timeout=2")
    assert response.status_code == 410 and response.json()["code"] == "event_id_expired"


def test_the_cli_waits_for_its_grant_with_long_polls_not_a_poll_a_second(
        server: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from gpupool_cli.client import Client
    from gpupool_cli.main import main

    monkeypatch.setenv("GPUPOOL_URL", server["url"].removesuffix("/api/v1/"))
    monkeypatch.setenv("GPUPOOL_TOKEN", server["alice"])
    monkeypatch.setenv("GPUPOOL_CONFIG", str(tmp_path / "config.json"))
    calls: list[tuple[str, dict[str, Any]]] = []
    real = Client.request

    def counting(self: Client, method: str, path: str, **kw: Any) -> Any:
        calls.append((method, kw.get("params") or {}))
        return real(self, method, path, **kw)

    monkeypatch.setattr(Client, "request", counting)
    done = _in_background(main, ["request", "--pool", "training", "--gpus", "1", "--wait", "-o", "json"])
    time.sleep(3.0)  # three seconds pending: a poller would have asked three times
    _pass()
    assert done.get(timeout=30) == 0
    gets = [params for method, params in calls if method == "GET"]
    assert 1 <= len(gets) <= 3
    assert any("wait" in params and params.get("state") == "pending" for params in gets)


def test_a_lost_change_log_ends_the_stream_and_resuming_from_before_the_loss_is_a_410(
        server: dict[str, Any]) -> None:
    """Redis restarted or flushed: changes no one had read are gone, so a watcher must not go on
    as if it had seen everything; it is told to list again."""
    import redis
    from django.conf import settings

    from allocation.events import STREAM

    alice = _session(server["alice"])
    stream = Stream(alice, server["url"] + "leases/events/?team=vision")
    stream.take(1, kind="bookmark")
    _create(server)
    last = stream.take(1)[0]["id"]
    redis.Redis.from_url(settings.REDIS_URL).delete(STREAM)
    deadline = time.monotonic() + 30
    while stream.response.raw is not None and not stream.response.raw.closed and time.monotonic() < deadline:
        time.sleep(0.2)
    assert time.monotonic() < deadline, "the stream should end once the feed notices the loss"
    again = alice.get(f"{server['url']}leases/events/?since={last}&timeout=2")
    assert again.status_code == 410 and again.json()["code"] == "event_id_expired"
