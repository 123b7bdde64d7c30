"""The one project task decorator: explicit name, time limits, no results, logged failures."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import shared_task

logger = logging.getLogger("gpupool.tasks")


def gpupool_task(*, name: str, soft_time_limit: int = 120, time_limit: int = 150,
                 **options: Any) -> Callable[[Callable[..., Any]], Any]:
    return shared_task(name=name, ignore_result=True, soft_time_limit=soft_time_limit,
                       time_limit=time_limit, acks_late=True, **options)
