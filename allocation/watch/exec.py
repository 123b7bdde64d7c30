"""`/api/v1/leases/{id}/exec/` as a websocket on the event loop (pool/asgi.py routes it here); the
protocol is allocation/api/exec.py's.

The same authentication, strict parameters, team scope and JSON error bodies as the API: an error
found before the upgrade is answered as HTTP (the server's `websocket.http.response` extension;
without it, a close with code 4000 + status). The connector's session blocks (a websocket of the
Kubernetes client), so its reads run on the log streams' thread pool, one thread per session,
under their caps (allocation.workloads.logs.SLOTS): an exec counts as a stream. What the client
sends is passed on in order from the event loop; when the client leaves, the session is closed,
which hangs the command up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from allocation.watch.access import HttpError
from allocation.watch.feed import in_db
from allocation.watch.handlers import Receive, Send, authenticate
from allocation.watch.logs import executor

if TYPE_CHECKING:  # imported when first used: pool.asgi imports this before Django is set up
    from agents.shells import ExecSession
    from allocation.workloads.exec import WorkloadExec

logger = logging.getLogger(__name__)
READ_S = 0.5  # a session's read waits this long before it looks whether the client left
STDIN, RESIZE, CLOSE = 0, 4, 255


async def lease_exec(scope: dict[str, Any], receive: Receive, send: Send, *, lease_id: str) -> None:
    from allocation.api.exec import PROTOCOL
    from allocation.workloads.logs import SLOTS

    if (await receive())["type"] != "websocket.connect":
        return
    with ExitStack() as slot:
        try:
            viewer = await authenticate(scope)
            found = await in_db(_prepare, viewer.user, lease_id, scope["path"], scope.get("query_string", b""))
            if not isinstance(found, tuple):
                slot.enter_context(SLOTS.take(found.user_id))
                session: ExecSession = await asyncio.get_running_loop().run_in_executor(executor(), found.open)
        except Exception as exc:
            found = _error_answer(exc)
        if isinstance(found, tuple):
            await _deny(scope, send, *found)
            return
        offered = scope.get("subprotocols") or []
        await send({"type": "websocket.accept", **({"subprotocol": PROTOCOL} if PROTOCOL in offered else {})})
        try:
            await _serve(session, receive, send)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, session.close)


def _prepare(user: Any, lease_id: str, path: str, raw_query: bytes) -> WorkloadExec | tuple[int, Any, Any]:
    """On a DB thread: the parameters checked as the API checks them, the workload found, the exec
    audited; or the error answer (status, body, headers)."""
    from django.http import QueryDict

    from allocation.api.exec import exec_request
    from allocation.workloads.exec import exec_audit
    from core.api.strict import check_path_query

    try:
        query = QueryDict(raw_query.decode("latin-1"))
        check_path_query(path, "GET", query.keys())
        target = exec_request(user, lease_id, query)
        exec_audit(target, actor=user.username)
        return target
    except Exception as exc:
        answer = _error_answer(exc)
        if answer is None:
            raise
        return answer


def _error_answer(exc: Exception) -> tuple[int, Any, Any]:
    """The API's error answer for `exc` (status, JSON body, headers); an unexpected one is a 500."""
    from allocation.watch.logs import _error_answer as api_error

    if isinstance(exc, HttpError):
        return exc.status, {"code": exc.code, "message": exc.message}, exc.headers
    answer = api_error(exc)
    if answer is None:
        logger.exception("exec endpoint failed", exc_info=exc)
        return 500, {"code": "server_error", "message": "internal error; it has been logged"}, ()
    return answer


async def _deny(scope: dict[str, Any], send: Send, status: int, body: Any, headers: Any) -> None:
    if "websocket.http.response" in (scope.get("extensions") or {}):
        payload = json.dumps(body).encode()
        await send({"type": "websocket.http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                                *headers]})
        await send({"type": "websocket.http.response.body", "body": payload})
    else:
        await send({"type": "websocket.close", "code": 4000 + status, "reason": str(body.get("code", ""))[:120]})


async def _serve(session: ExecSession, receive: Receive, send: Send) -> None:
    """Pass output on until the command ends (then its status, then close) or the client leaves."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
    left = threading.Event()

    def read() -> None:
        try:
            while not session.ended and not left.is_set():
                for item in session.read(READ_S):
                    loop.call_soon_threadsafe(queue.put_nowait, item)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    reading = loop.run_in_executor(executor(), read)
    client = loop.create_task(_from_client(session, receive))
    try:
        while (item := await _next(queue, client)) is not None:
            await send({"type": "websocket.send", "bytes": bytes([item[0]]) + item[1]})
        if client.done():
            return  # the client left: the caller closes the session, which ends the command
        end = {"exit_code": session.exit_code, "message": session.message}
        await send({"type": "websocket.send", "bytes": b"\x03" + json.dumps(end).encode()})
        await send({"type": "websocket.close", "code": 1000})
    finally:
        left.set()
        client.cancel()
        await loop.run_in_executor(None, session.close)
        with contextlib.suppress(Exception):
            await reading


async def _next(queue: asyncio.Queue[tuple[int, bytes] | None], client: asyncio.Task[None]) -> tuple[int, bytes] | None:
    """The next output, or None once the session ended or the client left."""
    if client.done() and queue.empty():
        return None
    getter = asyncio.ensure_future(queue.get())
    await asyncio.wait({getter, client}, return_when=asyncio.FIRST_COMPLETED)
    if getter.done():
        return getter.result()
    getter.cancel()
    return None


async def _from_client(session: ExecSession, receive: Receive) -> None:
    """The client's messages, in order, to the session, until it disconnects."""
    loop = asyncio.get_running_loop()
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        data = message.get("bytes") or (message.get("text") or "").encode()
        if not data:
            continue
        channel, payload = data[0], data[1:]
        try:
            if channel == STDIN:
                await loop.run_in_executor(None, session.write, payload)
            elif channel == RESIZE:
                size = json.loads(payload)
                await loop.run_in_executor(None, session.resize, int(size["width"]), int(size["height"]))
            elif channel == CLOSE and payload[:1] == b"\x00":
                await loop.run_in_executor(None, session.close_stdin)
        except Exception as exc:  # a bad message, or a session that ended meanwhile: drop it
            logger.debug("exec: dropped a client message: %s", exc)
