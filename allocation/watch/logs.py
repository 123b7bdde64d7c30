"""`GET /api/v1/leases/{id}/logs/?follow=&tail=` on the event loop (pool/asgi.py routes it here).

What the answer is, and its errors, are the API's (allocation/api/logs.py, the OpenAPI document):
the same authentication, the same strict parameters (core.api.strict), the same team scope and
the same JSON error body. What differs is where the waiting happens: a followed log may stay open
for hours, so it must not hold one of the few request threads of the WSGI application (a2wsgi).
The connector's reads block (an SSH channel, an HTTP answer), so they run on a thread pool of
their own, one read at a time per stream, while the event loop waits for the next chunk or the
client's disconnect, whichever comes first. A client that goes away closes the stream: the SSH
session or the API server's answer is closed from here, which ends the blocked read, and the
loop on the host ends within a second (agents.ssh_scripts). Each web process serves at most
GPUPOOL_LOG_STREAMS streams (allocation.workloads.logs.SLOTS): the pool has as many threads, and
a stream over the limit is a 503 before anything is opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from allocation.watch.feed import in_db
from allocation.watch.handlers import Receive, Send, authenticate, send_json

if TYPE_CHECKING:  # imported when first used: pool.asgi imports this before Django is set up
    from agents.base import LogStream
    from allocation.workloads.logs import WorkloadLog

logger = logging.getLogger(__name__)
CLOSE_WAIT_S = 10.0  # a read interrupted by close() returns at once; this only bounds a stuck one
_executor: ThreadPoolExecutor | None = None


def executor() -> ThreadPoolExecutor:
    """The streams' threads: one per open stream (its one blocking read at a time, or its opening,
    or the look at its workload once it ended), and spares for opens racing a slot's release."""
    global _executor
    if _executor is None:
        from allocation.workloads.logs import MAX_STREAMS

        _executor = ThreadPoolExecutor(max_workers=MAX_STREAMS + 2, thread_name_prefix="log-stream")
    return _executor


async def lease_logs(scope: dict[str, Any], receive: Receive, send: Send, *, lease_id: str) -> None:
    from allocation.workloads.logs import SLOTS, WorkloadLog

    viewer = await authenticate(scope)
    found = await in_db(_prepare, viewer.user, lease_id, scope["path"], scope.get("query_string", b""))
    if not isinstance(found, WorkloadLog):
        await send_json(send, *found)
        return
    loop = asyncio.get_running_loop()
    with ExitStack() as slot:
        try:
            slot.enter_context(SLOTS.take(found.user_id))
            stream: LogStream = await loop.run_in_executor(executor(), found.open)
        except Exception as exc:
            answer = _error_answer(exc)
            if answer is None:
                raise
            await send_json(send, *answer)
            return
        try:
            await _serve(stream, found, scope, receive, send)
        finally:
            await loop.run_in_executor(None, stream.close)


async def _serve(stream: LogStream, log: WorkloadLog, scope: dict[str, Any], receive: Receive, send: Send) -> None:
    from allocation.api.logs import CONTENT_TYPE, HEADERS

    headers = [(b"content-type", CONTENT_TYPE.encode()),
               *((name.lower().encode(), value.encode()) for name, value in HEADERS.items())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    if scope.get("method") == "HEAD":
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    outcome = await _pump(stream, receive, send)
    if outcome == "broken":
        return  # no last chunk: the client sees an incomplete answer, as it should
    if outcome == "ended" and stream.workload_ended:
        from allocation.workloads.logs import observe_ended

        await asyncio.get_running_loop().run_in_executor(executor(), observe_ended, log.lease_id)
    with contextlib.suppress(OSError):
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _pump(stream: LogStream, receive: Receive, send: Send) -> str:
    """Pass the stream's chunks on until it ends ("ended"), the client leaves ("left") or the
    stream breaks ("broken", logged)."""
    loop = asyncio.get_running_loop()
    left: asyncio.Future[Any] = loop.create_task(_wait_disconnect(receive))
    try:
        while True:
            reader: asyncio.Future[Any] = loop.run_in_executor(executor(), next, stream, None)
            done, _ = await asyncio.wait({reader, left}, return_when=asyncio.FIRST_COMPLETED)
            if reader not in done:
                await loop.run_in_executor(None, stream.close)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(reader, CLOSE_WAIT_S)
                return "left"
            try:
                chunk = reader.result()
            except Exception as exc:
                logger.warning("log stream broke: %s", getattr(exc, "message", exc))
                return "broken"
            if chunk is None:
                return "ended"
            try:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except OSError:
                return "left"
    finally:
        left.cancel()


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _prepare(user: Any, lease_id: str, path: str, raw_query: bytes) -> WorkloadLog | tuple[int, Any, Any]:
    """On a DB thread: the parameters checked as the API checks them, and the lease's log found;
    or the error answer (status, body, headers) for why not."""
    from django.http import QueryDict

    from allocation.api.logs import log_request
    from core.api.strict import check_path_query

    try:
        query = QueryDict(raw_query.decode("latin-1"))
        check_path_query(path, "GET", query.keys())
        return log_request(user, lease_id, query)
    except Exception as exc:
        answer = _error_answer(exc)
        if answer is None:
            raise
        return answer


def _error_answer(exc: Exception) -> tuple[int, Any, Any] | None:
    """The API's error answer for `exc` (core.api.errors): status, JSON body, headers."""
    from core.api.errors import exception_handler

    response = exception_handler(exc, {})
    if response is None:
        return None
    headers = tuple((name.lower().encode(), str(value).encode()) for name, value in response.items()
                    if name.lower() in ("retry-after",))
    return response.status_code, response.data, headers
