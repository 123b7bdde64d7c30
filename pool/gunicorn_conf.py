"""The web server's tuned configuration, read by every start of it (`make run`, the image, docker
compose, the Helm chart, and the stacks of the tests and benchmarks: stacktools.processes):

    gunicorn -c python:pool.gunicorn_conf pool.asgi:application --bind 0.0.0.0:8000

- `GPUPOOL_WEB_WORKERS` processes (default: one per core, at least 2 and at most 8; the Helm
  chart sets `web.processes`): the API is CPU-bound Python, so one process per core uses every
  core and no more (more processes than cores only add context switches between them). At most 8
  by default: each process holds a database connection per request thread and one for its outbox
  relay thread, and PostgreSQL's default max_connections is 100;
- uvicorn workers on the ASGI front (pool.asgi): waiting clients hold no thread, the API runs on
  `GPUPOOL_WEB_THREADS` request threads per process, each with its persistent database
  connection (CONN_MAX_AGE, `DB_CONN_MAX_AGE`);
- keep-alive connections held 30 s, so clients that reuse connections (the CLI, SDKs, wrk) pay
  no TCP setup per request.

The hot lease requests are served by the fast lease path (allocation/api/fast/,
`GPUPOOL_LEASE_FAST_PATH`), the hot lease statements are prepared (`GPUPOOL_DB_PREPARE`): both are
on by default, in settings.
"""

from __future__ import annotations

import os


def _workers() -> int:
    configured = os.environ.get("GPUPOOL_WEB_WORKERS", "").strip()
    if configured:
        return max(1, int(configured))
    return min(8, max(2, os.cpu_count() or 2))


worker_class = "uvicorn_worker.UvicornWorker"
workers = _workers()
keepalive = 30
graceful_timeout = int(os.environ.get("GPUPOOL_WEB_GRACEFUL_TIMEOUT_S", "30"))
