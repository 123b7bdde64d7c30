"""pool.wsgi_bridge: the WSGI app's answers reach the ASGI server whole and unchanged, in one hand-off
for a plain answer, chunk by chunk for a streaming one, and by the lazy way for bodies it must not
read up front. Driven as an ASGI server drives it (scope, receive, send) on a real event loop and
real request threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pool.wsgi_bridge import ThreadedWSGI


class Seen:
    """What the app saw of the last request, and on which thread."""

    environ: dict[str, Any] = {}
    body = b""
    thread = ""


def app(environ: dict[str, Any], start_response: Any) -> Any:
    Seen.environ, Seen.thread = environ, threading.current_thread().name
    Seen.body = environ["wsgi.input"].read()
    path = environ["PATH_INFO"]
    if path == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return Streaming()
    if path == "/write":
        write = start_response("200 OK", [("X-Way", "write")])
        write(b"first;")
        return [b"then"]
    if path == "/boom":
        raise RuntimeError("boom")
    start_response("201 Created", [("Content-Type", "application/json"), ("Set-Cookie", "a=1"),
                                   ("Set-Cookie", "b=2")])
    return Closing([b'{"echo": "', Seen.body, b'"}'])


class Closing(list[bytes]):
    closed = 0

    def close(self) -> None:
        Closing.closed += 1


class Streaming:
    streaming = True
    produced: list[str] = []

    def __iter__(self) -> Iterator[bytes]:
        for i in range(3):
            Streaming.produced.append(threading.current_thread().name)
            yield f"chunk{i};".encode()


def scope(path: str, method: str = "GET", headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "query_string": b"a=1", "http_version": "1.1",
            "scheme": "http", "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5555), "root_path": "",
            "headers": [(b"host", b"testserver"), *(headers or [])]}


def serve(bridge: ThreadedWSGI, request: dict[str, Any], chunks: list[bytes] | None = None) -> list[dict[str, Any]]:
    """Run one request through the bridge; the messages it sent, in order."""
    chunks = [b""] if chunks is None else chunks
    received = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
                for i, c in enumerate(chunks)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return received.pop(0) if received else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(bridge(request, receive, send))
    return sent


def body_of(sent: list[dict[str, Any]]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@pytest.fixture
def bridge() -> ThreadedWSGI:
    return ThreadedWSGI(app, workers=2)


def test_a_plain_answer_is_sent_whole_in_two_messages(bridge: ThreadedWSGI) -> None:
    closed = Closing.closed
    sent = serve(bridge, scope("/echo", "POST", [(b"content-length", b"7"), (b"content-type", b"text/x")]),
                 [b"hel", b"lo!", b"!"])
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 201
    assert sent[0]["headers"] == [(b"content-type", b"application/json"), (b"set-cookie", b"a=1"),
                                  (b"set-cookie", b"b=2")]
    assert sent[1] == {"type": "http.response.body", "body": b'{"echo": "hello!!"}'}
    assert Closing.closed == closed + 1  # the iterable's close() ran, as WSGI asks
    assert Seen.thread.startswith("WSGI")  # in a request thread, not on the loop
    assert Seen.environ["CONTENT_TYPE"] == "text/x" and Seen.environ["CONTENT_LENGTH"] == "7"
    assert Seen.environ["QUERY_STRING"] == "a=1" and Seen.environ["HTTP_HOST"] == "testserver"
    assert Seen.environ["REQUEST_METHOD"] == "POST" and Seen.environ["REMOTE_ADDR"] == "127.0.0.1"


def test_a_request_without_a_body_is_not_read(bridge: ThreadedWSGI) -> None:
    sent = serve(bridge, scope("/echo"), [])
    assert body_of(sent) == b'{"echo": ""}' and Seen.body == b""


def test_a_streaming_answer_is_sent_as_it_is_produced(bridge: ThreadedWSGI) -> None:
    Streaming.produced.clear()
    sent = serve(bridge, scope("/stream"))
    assert [m["type"] for m in sent] == ["http.response.start"] + ["http.response.body"] * 4
    assert [m.get("more_body", False) for m in sent[1:]] == [True, True, True, False]
    assert body_of(sent) == b"chunk0;chunk1;chunk2;"
    assert Streaming.produced and all(name.startswith("WSGI") for name in Streaming.produced)


def test_what_write_wrote_comes_before_the_iterable(bridge: ThreadedWSGI) -> None:
    sent = serve(bridge, scope("/write"))
    assert body_of(sent) == b"first;then" and sent[0]["headers"] == [(b"x-way", b"write")]


@pytest.mark.parametrize("headers", [
    [(b"transfer-encoding", b"chunked")],  # no length
    [(b"content-length", str(2 << 20).encode())],  # over the buffer
    [(b"content-length", b"twelve")],  # not a number: Django decides
])
def test_bodies_it_must_not_read_up_front_go_the_lazy_way(bridge: ThreadedWSGI, headers: Any) -> None:
    sent = serve(bridge, scope("/echo", "POST", headers), [b"ab", b"cd"])
    assert sent[0]["status"] == 201 and body_of(sent) == b'{"echo": "abcd"}'
    assert len(sent) > 2  # a2wsgi's way: the body and its end are separate messages


def test_an_error_in_the_app_reaches_the_server(bridge: ThreadedWSGI) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        serve(bridge, scope("/boom"))
