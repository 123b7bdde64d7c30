"""The web entry point: one ASGI application that serves the whole site.

    gunicorn pool.asgi:application -k uvicorn_worker.UvicornWorker   (production, make run)

Waiting requests (`GET leases/{id}/?wait=`, `GET leases/events/`) are coroutines on the event
loop: a thousand waiting clients hold no thread. A workload's log (`GET leases/{id}/logs/`) is
streamed from the event loop too, its blocking reads on a bounded pool of threads of its own, and
so is a command in a pod lease's container (`leases/{id}/exec/`, a websocket: allocation/watch/exec.py).
Everything else is the Django (WSGI) application on a fixed pool of request threads
(pool.wsgi_bridge: one hand-off to a thread and one back per request), each thread with its own
persistent database connection:
Django's own ASGI handler would start a thread and a database connection per request, which
measured 2-4x slower for the synchronous DRF views and exhausted PostgreSQL's connections.
"""

from __future__ import annotations

import os
import re
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pool.settings")

from django.core.wsgi import get_wsgi_application

from allocation.watch import exec as pod_exec
from allocation.watch import handlers, logs
from pool.wsgi_bridge import ThreadedWSGI

# Request threads per process (the API's concurrency; waiting clients do not count against it).
THREADS = int(os.environ.get("GPUPOOL_WEB_THREADS", "4"))

# django-stubs types a WSGIHandler call as returning HttpResponseBase, which is not iterable; the
# responses it returns (HttpResponse, StreamingHttpResponse) are, as WSGI asks. The hot lease
# requests are answered in front of Django (allocation/api/fast/) unless GPUPOOL_LEASE_FAST_PATH=0.
def _django_app() -> Any:
    wsgi = get_wsgi_application()  # sets Django up: the fast path's modules import models
    from allocation.api.fast.app import with_fast_leases

    _import_now()
    return with_fast_leases(wsgi)


def _import_now() -> None:
    """Import what requests import lazily (the URLconf and its views, the tasks a request queues)
    before the first request. Imported at once by several request threads, a module in an import
    cycle (allocation.engine and its snapshot) was seen half-made by one of them: an ImportError,
    an HTTP 500 on the first lease creates of a busy start (bench_kueue_baseline)."""
    from django.urls import get_resolver

    import allocation.tasks  # noqa: F401  (allocation.triggers queues its pass task)

    get_resolver().url_patterns  # noqa: B018  (the property imports every view module)


django_app = ThreadedWSGI(_django_app(), workers=THREADS)

EVENTS = re.compile(r"^/api/v1/leases/events/?$")
LEASE = re.compile(r"^/api/v1/leases/(?P<lease_id>[^/]+)/?$")
LOGS = re.compile(r"^/api/v1/leases/(?P<lease_id>[^/]+)/logs/?$")
EXEC = re.compile(r"^/api/v1/leases/(?P<lease_id>[^/]+)/exec/?$")


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    if scope["type"] == "websocket":
        match = EXEC.match(scope["path"])
        if match:
            await pod_exec.lease_exec(scope, receive, send, lease_id=match["lease_id"])
        else:  # no other websocket here: refused before the upgrade (HTTP 403)
            await send({"type": "websocket.close", "code": 1008})
        return
    if scope["type"] == "http":
        path = scope["path"]
        if EVENTS.match(path):
            await handlers.handle(handlers.lease_events, scope, receive, send)
            return
        match = LOGS.match(path)
        if match:
            await handlers.handle(logs.lease_logs, scope, receive, send, lease_id=match["lease_id"])
            return
        match = LEASE.match(path)
        if match and scope.get("method") == "GET" and "wait" in handlers.query(scope):
            await handlers.handle(handlers.wait_lease, scope, receive, send, lease_id=match["lease_id"])
            return
    await django_app(scope, receive, send)


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            # A server process (uvicorn starts its lifespan; an importer of this module does not):
            # lease events are published by one relay thread per process, not by each request after
            # its commit (allocation/outbox_thread.py).
            from django.conf import settings

            from allocation import outbox

            if settings.GPUPOOL.get("OUTBOX_RELAY_THREAD", True):
                outbox.relay_in_background()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
