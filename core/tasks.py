"""The one project task decorator: explicit name, time limits, no results, late acks, and for every
task the same logging, metrics and retry with backoff.

A task names the errors worth another attempt (`retry_on`); it is then retried with exponential
backoff and jitter, up to `max_retries`, and `final_attempt()` tells its body when this run is the
last (binding uses it to give up cleanly instead of leaving a lease half-bound). Transient database
errors are worth a retry for every task, periodic ones included: a restarted PostgreSQL must not
cost a reaping or discovery round.

Metrics are per process (`TASK_METRICS`): the web process serves them on `/metrics`, a worker on
the port named by `GPUPOOL_WORKER_METRICS_PORT` (see `pool.celery`).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from celery import shared_task
from django.db import InterfaceError, OperationalError
from prometheus_client import CollectorRegistry, Counter, Histogram

logger = logging.getLogger("gpupool.tasks")

TRANSIENT: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 60.0

TASK_METRICS = CollectorRegistry()
TASK_RUNS = Counter("gpupool_task_runs", "Task runs by outcome (success, retry, failure)",
                    ["task", "outcome"], registry=TASK_METRICS)
TASK_SECONDS = Histogram("gpupool_task_seconds", "Task run time", ["task"], registry=TASK_METRICS,
                         buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))

_ATTEMPT: contextvars.ContextVar[tuple[int, int]] = contextvars.ContextVar("gpupool_task_attempt", default=(0, 0))
F = TypeVar("F", bound=Callable[..., Any])


def backoff_s(retries: int, *, base: float = BACKOFF_BASE_S, cap: float = BACKOFF_MAX_S) -> float:
    """Seconds before attempt `retries + 1`: doubling from `base`, capped, with full jitter on the
    upper half so that many tasks failing together do not come back together."""
    delay = min(cap, base * (2 ** retries))
    return float(delay / 2 + random.uniform(0, delay / 2))


def final_attempt() -> bool:
    """Inside a task: whether this run is its last (no retry follows a failure)."""
    retries, max_retries = _ATTEMPT.get()
    return retries >= max_retries


def gpupool_task(*, name: str, soft_time_limit: int = 120, time_limit: int = 150,
                 retry_on: tuple[type[BaseException], ...] = (), max_retries: int = 6,
                 acks_late: bool = True, **options: Any) -> Callable[[F], Any]:
    """Register `func` as the Celery task `name`. Its body runs as written; the wrapper times it,
    logs failures, counts outcomes and retries `retry_on` errors (and transient database errors).

    Acknowledged late by default: a task whose worker dies is delivered again, once the broker's
    visibility timeout has passed (settings.CELERY_BROKER_TRANSPORT_OPTIONS). `acks_late=False`
    is for a task that a periodic run replaces sooner than that (the scheduling pass)."""
    retryable = (*TRANSIENT, *retry_on)

    def decorate(func: F) -> Any:
        @functools.wraps(func)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            retries = int(self.request.retries or 0)
            token = _ATTEMPT.set((retries, max_retries))
            started = time.perf_counter()
            try:
                result = func(*args, **kwargs)
            except retryable as exc:
                if retries >= max_retries:
                    TASK_RUNS.labels(name, "failure").inc()
                    logger.error("task %s failed after %d retries: %s", name, retries, exc)
                    raise
                countdown = backoff_s(retries)
                TASK_RUNS.labels(name, "retry").inc()
                logger.warning("task %s: %s; retry %d/%d in %.1fs", name, exc, retries + 1, max_retries, countdown)
                raise self.retry(exc=exc, countdown=countdown, max_retries=max_retries) from exc
            except Exception:
                TASK_RUNS.labels(name, "failure").inc()
                logger.exception("task %s failed", name)
                raise
            finally:
                _ATTEMPT.reset(token)
                TASK_SECONDS.labels(name).observe(time.perf_counter() - started)
            TASK_RUNS.labels(name, "success").inc()
            return result

        # Celery checks call arguments against the signature; it must be the body's plus `self`
        # (functools.wraps would make it look like the body's alone).
        del run.__wrapped__
        signature = inspect.signature(func)
        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                        *signature.parameters.values()])
        decorator = shared_task(name=name, bind=True, ignore_result=True, soft_time_limit=soft_time_limit,
                                time_limit=time_limit, acks_late=acks_late, max_retries=max_retries, **options)
        return decorator(run)  # type: ignore[no-untyped-call]  # celery-types leave shared_task's decorator untyped

    return decorate
