"""The periodic task of the time series store: thin; the work is in `history.services`."""

from __future__ import annotations

import logging

from core.tasks import gpupool_task
from history.services import history_record

logger = logging.getLogger(__name__)


@gpupool_task(name="history.record", soft_time_limit=50, time_limit=58)
def record_history() -> None:
    report = history_record()
    logger.debug("history %s: %s points, %d pruned", report.minute, report.points, report.pruned)
