"""`GET leases/{id}/logs/`: its parameters, its documentation, and the answer a WSGI server
streams (the ASGI front serves the same endpoint on its event loop: allocation/watch/logs.py).

The answer is the workload's output as `text/plain; charset=utf-8` (the bytes as the workload
wrote them: stdout and stderr interleaved for a process, the first container's log for a pod),
chunked, and it simply ends when the log does: at once without `follow`, once the workload has
ended with it. Nothing is added to the output; how the workload ended is the lease's to say
(`state`, `exit_code`, `reason`), and the server records that end before the answer ends, so
the lease already shows it when the client reads it next. A stream that breaks (the host went
away) ends without the last chunk of the chunked encoding, which HTTP clients report as an
incomplete answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack
from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer

from agents.base import LogStream
from allocation.workloads.logs import SLOTS, WorkloadLog, lease_log, observe_ended
from core.api.schema import ErrorSerializer

CONTENT_TYPE = "text/plain; charset=utf-8"
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no", "X-Content-Type-Options": "nosniff"}
MAX_TAIL = 100_000


class LogsQuerySerializer(serializers.Serializer[Any]):
    follow = serializers.BooleanField(
        required=False, default=False,
        help_text="Keep the answer open and send what the workload writes as it writes it, until it ends.")
    tail = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_TAIL,
        help_text="Only the last N lines written so far (0: none, with `follow` only what comes next); "
                  "absent: the whole log.")


def log_request(user: Any, lease_id: Any, query: Mapping[str, Any]) -> WorkloadLog:
    """Validate the parameters (400 `invalid` naming them) and find the lease's log (404, 409;
    see `lease_log`)."""
    params = LogsQuerySerializer(data=query)
    params.is_valid(raise_exception=True)
    return lease_log(user=user, lease_id=lease_id, tail=params.validated_data.get("tail"),
                     follow=params.validated_data["follow"])


class AnyAccept(DefaultContentNegotiation):
    """A client that asks for `text/plain` only (a log reader) is answered, not refused with a
    406: the log itself is text, and its errors are the JSON error body whatever was asked."""

    def select_renderer(self, request: Any, renderers: Iterable[BaseRenderer],
                        format_suffix: str | None = None) -> Any:
        renderers = list(renderers)
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except NotAcceptable:
            return renderers[0], renderers[0].media_type


_ERRORS = {
    409: "The lease has no workload (`no_workload`) or it has not started yet (`workload_not_started`).",
    410: "The log no longer exists (`logs_gone`): its pod was deleted, its directory removed from the host.",
    429: "You have too many log streams open on this server (`too_many_log_streams`); see Retry-After.",
    502: "The workload's host or API server could not be reached (`logs_unavailable`); retry.",
    503: "This server serves its most log streams at once (`log_streams_busy`), or the database is "
         "unavailable; retry after the Retry-After delay.",
}
DOCUMENTED = extend_schema(
    summary="Read a lease's workload output",
    description=(__doc__ or "").split("\n\n", 1)[1].strip() + "\n\nTeam-scoped like the lease: another team's "
                "lease is a 404. Served by the ASGI application (the blocking reads on threads of their own); "
                "each web process serves GPUPOOL_LOG_STREAMS streams at once (default 32), a user "
                "GPUPOOL_LOG_STREAMS_PER_USER of them (default 8).",
    request=None, filters=False, parameters=[LogsQuerySerializer],
    responses={(200, "text/plain"): OpenApiResponse(response={"type": "string"}, description="The output, "
                                                    "streamed (chunked) as `text/plain; charset=utf-8`."),
               **{(code, "application/json"): OpenApiResponse(response=ErrorSerializer, description=text)
                  for code, text in _ERRORS.items()}},
)


class LogBody:
    """The streamed body of a WSGI answer: the log's chunks, and, once the log ends with its
    workload, that end recorded on the lease. `close()` (the server calls it when the answer is
    done or the client left) closes the stream and frees its slot."""

    def __init__(self, log: WorkloadLog, stream: LogStream, release: Callable[[], None]) -> None:
        self.log, self.stream, self.release = log, stream, release

    def __iter__(self) -> Iterator[bytes]:
        yield from self.stream
        if self.stream.workload_ended:
            observe_ended(self.log.lease_id, close_connection=False)

    def close(self) -> None:
        self.stream.close()
        self.release()


def log_response(user: Any, lease_id: Any, query: Mapping[str, Any]) -> StreamingHttpResponse:
    """The answer of a WSGI server (it holds a request thread for as long as the stream lasts)."""
    log = log_request(user, lease_id, query)
    with ExitStack() as stack:
        stack.enter_context(SLOTS.take(log.user_id))
        stream = log.open()
        release = stack.pop_all().close
    response = StreamingHttpResponse(LogBody(log, stream, release), content_type=CONTENT_TYPE)
    for name, value in HEADERS.items():
        response[name] = value
    return response
