"""The WSGI application (Django behind the fast lease path) served from the ASGI event loop on a
fixed pool of request threads, with one hand-off to the thread and one back per request.

a2wsgi, used alone before, crosses between the loop and the request thread at every step: the
body's read, the status line, each chunk of the body and its end are each a coroutine the thread
hands to the loop and blocks on, the loop woken through its self-pipe for each. In the web
process's profile of the Kueue baseline that plumbing was about a third of the CPU (GIL samples),
more than the lease's own work. Here the loop reads the request body before the thread starts and
the thread hands back the whole answer: one `run_in_executor` a request.

Kept on a2wsgi's way (its lazy body, chunk by chunk answers), on the same threads:
- a body with no length (chunked) or over `buffer_max`: Django's own limits decide on it (a
  413 from its length, unread), and a large upload is not held in memory by the loop;
- a streaming answer (StreamingHttpResponse, FileResponse): its chunks are produced in the
  thread and sent as they come, never joined.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import io
import itertools
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from a2wsgi import WSGIMiddleware
from a2wsgi.wsgi import build_environ

WSGIApp = Callable[..., Iterable[bytes]]
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]

# Larger than any lease request (a batch of 1,000 leases is ~200 KiB), smaller than Django's
# DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB): what Django would refuse is read its own way.
BUFFER_MAX = 1 << 20


class ThreadedWSGI:
    """ASGI (http scopes): `app` on `workers` threads, one hand-off each way per request."""

    def __init__(self, app: WSGIApp, workers: int, buffer_max: int = BUFFER_MAX) -> None:
        self.app = app
        self.buffer_max = buffer_max
        self.lazy = WSGIMiddleware(app, workers=workers)
        # One pool of request threads for both ways (each thread holds a database connection).
        self.executor: ThreadPoolExecutor = self.lazy.executor

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        length = _buffered_length(scope, self.buffer_max)
        if length is None:
            await self.lazy(scope, receive, send)  # type: ignore[arg-type]
            return
        body = await _read_body(receive) if length else b""
        environ = cast("dict[str, Any]", build_environ(scope, io.BytesIO(body)))  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        respond = functools.partial(contextvars.copy_context().run, self._respond, environ, loop, send)
        answer: Answer | None = await loop.run_in_executor(self.executor, respond)
        if answer is None:  # streamed from the thread
            return
        status, headers, content = answer
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    def _respond(self, environ: dict[str, Any], loop: asyncio.AbstractEventLoop, send: Any) -> Answer | None:
        """In a request thread: the app's whole answer, or None once a streaming one was sent."""
        started: list[Any] = []
        written: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            # Nothing is sent before the app returns: a second call (with exc_info) replaces the first.
            started[:] = [int(status.split(" ", 1)[0]),
                          [(name.strip().lower().encode("latin1"), value.strip().encode("latin1"))
                           for name, value in headers]]
            return written.append  # WSGI's write(): kept in order, before the iterable's chunks

        result = self.app(environ, start_response)
        try:
            if getattr(result, "streaming", False):
                self._stream(result, started, written, loop, send)
                return None
            content = b"".join([*written, *result])
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        status, headers = started
        return status, headers, content

    @staticmethod
    def _stream(result: Iterable[bytes], started: list[Any], written: list[bytes],
                loop: asyncio.AbstractEventLoop, send: Any) -> None:
        def sent(message: dict[str, Any]) -> None:
            asyncio.run_coroutine_threadsafe(send(message), loop).result()

        sent({"type": "http.response.start", "status": started[0], "headers": started[1]})
        for chunk in itertools.chain(written, result):
            if chunk:
                sent({"type": "http.response.body", "body": chunk, "more_body": True})
        sent({"type": "http.response.body", "body": b""})


def _buffered_length(scope: dict[str, Any], buffer_max: int) -> int | None:
    """The body's declared length when it may be read up front; None for the lazy way (no
    length with a chunked body, a length over `buffer_max`, or one that is not a number)."""
    length = None
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return None
        elif name == b"transfer-encoding":
            return None
    if length is None:
        return 0
    return length if 0 <= length <= buffer_max else None


async def _read_body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client left: Django sees what came
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
