"""Shared fixtures: users and tokens, the demo fleet, tiers (PostgreSQL, Redis, sshd)."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

# A suite started in the background by a non-interactive shell inherits SIGINT ignored, and an
# ignored signal stays ignored in every process it starts: the CLI processes of the Ctrl-C tests
# (tests/cli) then never heard it and hung. A handler is reset to the default in a child, so the
# children of a suite that holds Python's own are interruptible however the suite was started.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "test-artifacts"

#: Fixtures shared by several folders, registered once here (a conftest serves only its own folder,
#: and a fixture imported by hand into another conftest is a second registration of it).
pytest_plugins = [
    "tests.support.ssh_fixtures",        # a real sshd, fake GPU hosts (agents, integration)
    "tests.support.kube",                # kube_api: a Kubernetes API test server (agents, integration, …)
    "tests.support.dashboard_fixtures",  # the seeded and the busy fleets (frontend, history, api)
    "tests.support.oidc",                # oidc_provider: a real OpenID Provider (single sign-on tests)
]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: Any, django_db_blocker: Any) -> None:
    """The test database's tables are never vacuumed or analysed behind the tests' back. Tests of
    plans "whatever the statistics say" forget a table's statistics in their transaction; an
    autovacuum worker (on in PostgreSQL by default, and in the embedded server a fresh machine's
    `make test` starts) rewrites the table's page and row counts in place, whatever transaction
    reads them, and the plan the test checks can change with them. Seen on this machine's server
    just after autovacuum was turned on (CI's has it off): tests/allocation/test_pass_reads_history.py
    failed 2 runs in 8, on a plan that read the whole queue; with autovacuum off, or these tables
    left alone, it has not failed since."""
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cur:
        cur.execute("SELECT format('ALTER TABLE %I.%I SET (autovacuum_enabled = false)', schemaname, tablename) "
                    "FROM pg_tables WHERE schemaname = current_schema()")
        for (statement,) in cur.fetchall():
            cur.execute(statement)


def pytest_report_header(config: Any) -> list[str]:
    db = settings.DATABASES["default"]
    return [f"gpupool engines: database={db['NAME']} at {db['HOST'] or 'localhost'} redis={settings.REDIS_URL} "
            f"sshd={'yes' if shutil.which('sshd') or os.path.exists('/usr/sbin/sshd') else 'no'}"]


@pytest.fixture(autouse=True)
def _no_event_passes(settings: Any) -> None:
    """Tests run passes explicitly (`run_pass`), like `GPUPOOL_AUTOSCHEDULE=0` in production."""
    settings.GPUPOOL = {**settings.GPUPOOL, "AUTOSCHEDULE": False}


def _clear_cache() -> None:
    """Django's cache entries only: on Redis the test database also holds the Celery broker's
    queues and the lease event stream, which a FLUSHDB would pull from under a running worker."""
    from django.core.cache import caches
    from django.core.cache.backends.redis import RedisCache

    # The backend itself: `django.core.cache.cache` is a ConnectionProxy, whatever the backend.
    cache = caches["default"]
    if not isinstance(cache, RedisCache):
        cache.clear()
        return
    client = cache._cache.get_client(write=True)
    keys = list(client.scan_iter(match=f"{cache.key_prefix}:*:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    """Every test starts with an empty cache (throttle counters, capacity profiles, cached tokens):
    what one test leaves there must not decide another's outcome."""
    from core.api.auth import clear_token_cache

    _clear_cache()
    clear_token_cache()


@pytest.fixture(autouse=True)
def _no_lease_rate_limit(settings: Any) -> None:
    """The per-user lease throttle counts in the cache, which outlives a test, and on SQLite user
    ids repeat from test to test: every test's requests would add up for "alice" (600/min is
    reached within one run). tests/api/test_lease_create_throttle.py sets its own rate."""
    rates = {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "lease_create": "1000000/min"}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}


@pytest.fixture
def make_user(db: Any) -> Any:
    from django.contrib.auth import get_user_model

    def make(username: str, *, teams: tuple[str, ...] = (), admin: bool = False) -> Any:
        from allocation.models import Team

        user, _ = get_user_model().objects.get_or_create(username=username)
        user.is_staff = admin
        user.save()
        for name in teams:
            team, _ = Team.objects.get_or_create(name=name)
            team.members.add(user)
        return user

    return make


@pytest.fixture
def api(make_user: Any) -> Any:
    """`api(user)` → an APIClient authenticated with a token of that user (`scope="read"`: a
    read-only one)."""
    from rest_framework.test import APIClient

    from tests.support.tokens import api_key

    keys: dict[int, str] = {}  # one key per user within a test, like a real client keeps its own

    def client_for(user: Any = None, *, scope: str = "write") -> APIClient:
        client = APIClient()
        if user is not None:
            key = keys.get(user.pk) if scope == "write" else None
            if key is None:
                key = api_key(user, scope=scope)
                if scope == "write":
                    keys[user.pk] = key
            client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        return client

    return client_for


@pytest.fixture
def demo_fleet(db: Any) -> Iterator[dict[str, Any]]:
    """examples/demo.yaml applied and discovered: 2 pools, 3 teams, 40 simulated GPUs."""
    from allocation.config import load_config_file
    from allocation.config.apply import config_apply
    from inventory.discovery import source_discover
    from inventory.models import Source

    config_apply(load_config_file(REPO / "examples" / "demo.yaml"))
    for source in Source.objects.all():
        source_discover(source=source)
    yield {"pools": ["training", "inference"]}


@pytest.fixture
def apply_yaml(db: Any) -> Any:
    """Apply a YAML string as configuration (and discover simulated sources)."""
    from allocation.config import parse_config
    from allocation.config.apply import config_apply
    from inventory.discovery import source_discover
    from inventory.models import Source

    def apply(text: str, *, discover: bool = True) -> list[str]:
        changes = config_apply(parse_config(text, "test.yaml"))
        if discover:
            for source in Source.objects.all():
                source_discover(source=source)
        return changes

    return apply


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
