"""Run a source's connector and reconcile what it found."""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import datetime
from typing import Any

from agents.base import AgentError, Connector, Discovery
from agents.registry import get_connector
from core.db import db_now
from inventory.models import Source
from inventory.secrets import source_secrets_merge, source_secrets_open
from inventory.selectors import hosts_backing_off
from inventory.sync import SyncReport, sync_source

logger = logging.getLogger(__name__)


def source_connector(source: Source) -> Connector:
    """The connector for a source, with its stored secrets decrypted into the config."""
    config: dict[str, Any] = source_secrets_merge(source.config, source_secrets_open(source.kind, source.secret))
    return get_connector(source.kind, source.name, config)


def source_discover(*, source: Source, now: datetime | None = None,
                    skip: Collection[str] | None = None) -> SyncReport:
    """Discover one source now and reconcile it; connector failures become the source's error.

    `skip` names the hosts not to probe this time. None (the beat's rounds): those backing off
    (`hosts_backing_off`), where the source's kind backs off per host (`Connector.host_backoff`;
    SSH does, Kubernetes reads a cluster in one call and does not). Empty: every host, now (an
    admin's `manage.py discover`). Hosts left out keep their rows, GPUs and leases as they are."""
    backoff, left_out = None, frozenset[str]()
    try:
        connector = source_connector(source)
        backoff = connector.host_backoff()
        if backoff is not None:
            left_out = frozenset(hosts_backing_off(source=source, now=now or db_now()) if skip is None else skip)
        discovery = connector.discover_except(left_out)
    except AgentError as exc:
        discovery = Discovery(error=exc.message)
    except Exception as exc:  # a connector bug must not stop the other sources
        logger.exception("discovery of source %s crashed", source.name)
        discovery = Discovery(error=f"discovery failed: {type(exc).__name__}: {exc}")
    report = sync_source(source, discovery, now=now or db_now(), backoff=backoff)
    report.hosts_skipped = len(left_out)
    return report


def sources_due(now: datetime | None = None) -> list[Source]:
    now = now or db_now()
    return [s for s in Source.objects.all()
            if s.last_discovery_at is None
            or (now - s.last_discovery_at).total_seconds() >= s.interval_s]
