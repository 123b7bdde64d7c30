"""The two waiting endpoints, as plain ASGI handlers on the event loop (see pool/asgi.py):

- `GET /api/v1/leases/{id}/?wait=SECONDS[&state=S][&seen=ETAG]`: a long poll. Answers with the lease
  as soon as its state differs from `state` (default: its state when the call arrives), or, with
  `seen` (the ETag of an earlier answer), as soon as anything in it differs (reason, queue
  position, estimated start too), or when SECONDS (at most 60) have passed. Every answer carries
  the lease's ETag.
- `GET /api/v1/leases/events/?team=&pool=&since=ID[&timeout=S]`: Server-Sent Events, one per lease
  change (`id:` the event id, `event: lease`, `data:` the lease JSON), resumable from `since` or
  the `Last-Event-ID` header. It opens with a `bookmark` event carrying the current position, so a
  client can resume even if nothing changes; a resume point the log no longer holds is a 410 with
  code `event_id_expired` (list the leases again, then watch from the new bookmark).

A waiting client holds a coroutine, not a thread: the API's request threads stay free. Database
reads run on the feed's few DB threads. Authentication is the API's (token or session); a member
sees their teams' leases, a pool admin all.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from allocation.events import LeaseChange
from allocation.watch import access
from allocation.watch.access import HttpError
from allocation.watch.feed import POKE, BadEventId, Expired, feed, in_db, parse_event_id
from allocation.watch.rendered import renderer

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]

MAX_WAIT_S = 60.0
RECHECK_S = 5.0  # a long poll re-reads the lease this often even without a notification
HEARTBEAT_S = 15.0
DEFAULT_STREAM_S = 1800.0  # like a Kubernetes watch timeout: the client reconnects and resumes


def query(scope: dict[str, Any]) -> dict[str, str]:
    raw = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    return {k: v[-1] for k, v in raw.items()}


def _headers(scope: dict[str, Any]) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _seconds(params: dict[str, str], name: str, default: float, maximum: float) -> float:
    raw = params.get(name, "")
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise HttpError(400, f"invalid_{name}", f"{name} must be a number of seconds, got {raw[:20]!r}") from None
    if not 0 <= value < float("inf"):
        raise HttpError(400, f"invalid_{name}", f"{name} must be between 0 and {maximum:g} seconds")
    return min(value, maximum)


async def send_json(send: Send, status: int, body: Any, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"cache-control", b"no-store"),
                            (b"content-length", str(len(payload)).encode()), *headers]})
    await send({"type": "http.response.body", "body": payload})


async def handle(handler: Callable[..., Awaitable[None]], scope: dict[str, Any], receive: Receive,
                 send: Send, **kwargs: Any) -> None:
    """Run a handler; its HttpErrors (and unexpected failures) become the API's JSON error body."""
    if scope.get("method") not in ("GET", "HEAD"):
        await send_json(send, 405, {"code": "method_not_allowed", "message": "only GET is allowed here"},
                        ((b"allow", b"GET"),))
        return
    try:
        await handler(scope, receive, send, **kwargs)
    except HttpError as exc:
        await send_json(send, exc.status, {"code": exc.code, "message": exc.message}, exc.headers)
    except Exception as exc:  # the database is away, most likely: say so in JSON, never a trace
        import logging

        logging.getLogger(__name__).exception("watch endpoint failed")
        from django.db import DatabaseError

        if isinstance(exc, DatabaseError):
            await send_json(send, 503, {"code": "database_unavailable",
                                        "message": "the database is not answering; retry shortly"},
                            ((b"retry-after", b"5"),))
        else:
            await send_json(send, 500, {"code": "server_error", "message": "internal error; it has been logged"})


async def authenticate(scope: dict[str, Any]) -> access.Viewer:
    viewer: access.Viewer | None = await in_db(access.viewer_from_headers, _headers(scope))
    if viewer is None:
        raise HttpError(401, "not_authenticated", "Authentication credentials were not provided or are invalid.",
                        ((b"www-authenticate", b"Token"),))
    return viewer


async def _check_parameters(scope: dict[str, Any]) -> None:
    """The API's strict query (core.api.strict): a parameter the operation does not document is a
    400 `unknown_parameter` naming it, as on every other endpoint. On a DB thread: the first call
    per process derives the operation's parameters (milliseconds), which the event loop must not
    wait for."""
    from core.api.strict import check_path_query
    from core.errors import DomainError

    names = list(query(scope))
    try:
        await in_db(check_path_query, scope["path"], "GET", names)
    except DomainError as exc:
        raise HttpError(exc.status, exc.code, exc.message) from None


# --- long poll ------------------------------------------------------------------------------------
async def wait_lease(scope: dict[str, Any], receive: Receive, send: Send, *, lease_id: str) -> None:
    params = query(scope)
    wait_s = _seconds(params, "wait", 0.0, MAX_WAIT_S)
    viewer = await authenticate(scope)
    if not access.is_uuid(lease_id):
        raise HttpError(404, "not_found", "No Lease matches the given query.")
    await _check_parameters(scope)
    deadline = time.monotonic() + wait_s
    # A pass that only changes the lease's explanation pokes this subscriber too (feed.POKE).
    sub = await feed().subscribe(lambda change: change.lease_id == lease_id, lease_id=lease_id) if wait_s > 0 else None
    try:
        state, body, etag = await in_db(access.lease_state_and_json, viewer, lease_id)
        if state is None:
            raise HttpError(404, "not_found", "No Lease matches the given query.")
        seen_state, seen_etag = params.get("state") or state, params.get("seen", "").strip('"')
        while (etag == seen_etag if seen_etag else state == seen_state) and sub is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            woken: list[tuple[str, LeaseChange]] = []
            try:
                woken.append(await asyncio.wait_for(sub.queue.get(), timeout=min(left, RECHECK_S)))
                while not sub.queue.empty():  # one read for a burst of changes
                    woken.append(sub.queue.get_nowait())
            except TimeoutError:
                pass
            state, body, etag = await _lease_now(viewer, lease_id, woken)
        await send_json(send, 200, body, ((b"etag", f'"{etag}"'.encode()),))
    finally:
        if sub is not None:
            feed().unsubscribe(sub)


async def _lease_now(viewer: access.Viewer, lease_id: str,
                     woken: list[tuple[str, LeaseChange]]) -> tuple[str, bytes, str]:
    """The lease after a wake-up: woken by changes only, the last one's rendering, shared with the
    streams that send it (allocation/watch/rendered.py); else (a poke, a timeout) read again."""
    if woken and all(event_id and change is not POKE for event_id, change in woken):
        from allocation.api.lease_json import lease_etag  # Django's models: loaded once apps are

        last = (await renderer().get(woken[-1:]))[0]
        if last.body is not None:
            return last.state, last.body, lease_etag(last.body)
    state, body, etag = await in_db(access.lease_state_and_json, viewer, lease_id)
    if state is None:
        raise HttpError(404, "not_found", "No Lease matches the given query.")
    return state, body, etag


# --- the event stream -----------------------------------------------------------------------------
async def lease_events(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    params = query(scope)
    viewer = await authenticate(scope)
    duration = _seconds(params, "timeout", DEFAULT_STREAM_S, 24 * 3600.0)
    await _check_parameters(scope)
    since = _headers(scope).get("last-event-id") or params.get("since", "")
    if since:
        try:
            parse_event_id(since)
        except BadEventId as exc:
            raise HttpError(400, "invalid_event_id", str(exc)) from None
    wants: Callable[[LeaseChange], bool] = await in_db(
        access.change_filter, viewer, params.get("team", ""), params.get("pool", ""))
    source = feed()
    # A member's stream is filed under their teams: the feed never offers it another team's change.
    sub = await source.subscribe(wants, teams=None if viewer.is_admin else viewer.team_ids)
    try:
        head = source.head
        backlog: list[tuple[str, LeaseChange]] = []
        if since:
            try:
                backlog = [(i, c) for i, c in await source.backlog(since, head) if wants(c)]
            except Expired:
                raise HttpError(410, "event_id_expired",
                                f"event {since} is older than the changes still kept; list the leases "
                                "again and watch from the new bookmark") from None
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no")]})
        await _chunk(send, f"retry: 2000\nid: {since or head}\nevent: bookmark\ndata: {{}}\n\n")
        if backlog:
            await _emit(send, backlog)
        await _stream(send, receive, viewer, sub, floor=parse_event_id(head), until=time.monotonic() + duration)
    finally:
        source.unsubscribe(sub)


async def _stream(send: Send, receive: Receive, viewer: access.Viewer, sub: Any, *, floor: tuple[int, ...],
                  until: float) -> None:
    disconnected = asyncio.get_running_loop().create_task(_wait_disconnect(receive))
    try:
        while not disconnected.done() and not sub.overflowed:
            left = until - time.monotonic()
            if left <= 0:
                break
            getter = asyncio.ensure_future(sub.queue.get())
            done, _ = await asyncio.wait({getter, disconnected}, timeout=min(left, HEARTBEAT_S),
                                         return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                if not disconnected.done():
                    await _chunk(send, ": keep-alive\n\n")
                continue
            batch = [getter.result()]
            while not sub.queue.empty():
                batch.append(sub.queue.get_nowait())
            if sub.overflowed:  # behind or the log was lost: end, the client resumes or re-lists
                break
            # Changes already sent from the backlog were queued live too: skip them.
            batch = [(i, c) for i, c in batch if parse_event_id(i) > floor]
            if batch:
                await _emit(send, batch)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except OSError:  # the client went away mid-write
        pass
    finally:
        disconnected.cancel()


async def _emit(send: Send, batch: list[tuple[str, LeaseChange]]) -> None:
    """Send the changes (already filtered by the stream's `wants`), each rendered once per process
    and shared with every other stream that sends it (allocation/watch/rendered.py)."""
    frames = b"".join(r.frame for r in await renderer().get(batch))
    if frames:
        await send({"type": "http.response.body", "body": frames, "more_body": True})


async def _chunk(send: Send, text: str) -> None:
    await send({"type": "http.response.body", "body": text.encode(), "more_body": True})


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
