"""Run a source's connector and reconcile what it found."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from agents.base import AgentError, Connector, Discovery
from agents.registry import get_connector
from core.db import db_now
from inventory.models import Source
from inventory.secrets import source_secrets_merge, source_secrets_open
from inventory.sync import SyncReport, sync_source

logger = logging.getLogger(__name__)


def source_connector(source: Source) -> Connector:
    """The connector for a source, with its stored secrets decrypted into the config."""
    config: dict[str, Any] = source_secrets_merge(source.config, source_secrets_open(source.kind, source.secret))
    return get_connector(source.kind, source.name, config)


def source_discover(*, source: Source, now: datetime | None = None) -> SyncReport:
    """Discover one source now and reconcile it; connector failures become the source's error."""
    try:
        discovery = source_connector(source).discover()
    except AgentError as exc:
        discovery = Discovery(error=exc.message)
    except Exception as exc:  # a connector bug must not stop the other sources
        logger.exception("discovery of source %s crashed", source.name)
        discovery = Discovery(error=f"discovery failed: {type(exc).__name__}: {exc}")
    return sync_source(source, discovery, now=now or db_now())


def sources_due(now: datetime | None = None) -> list[Source]:
    now = now or db_now()
    return [s for s in Source.objects.all()
            if s.last_discovery_at is None
            or (now - s.last_discovery_at).total_seconds() >= s.interval_s]
