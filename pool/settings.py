"""gpupool settings: one module, every value read from the environment (12-factor).

With no DATABASE_URL / REDIS_URL the service runs on embedded engines: a PostgreSQL server and a
Redis server under var/ (core/embedded.py), started by the first process that needs them, so
`make run` works on a bare machine and runs the code production runs. Set both to use your own
servers (REDIS_SENTINELS and REDIS_MASTER_NAME instead of REDIS_URL for a Sentinel group); no
other change is needed.
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path
from typing import Any, TypedDict

import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from core import embedded
from core.database_url import DatabaseUrlError, hosts, is_local, parse_database_url
from core.env import env_bool, env_int, env_list, env_str
from core.redis_clients import target_from_env

# Django's generic classes subscriptable at run time (ModelAdmin[Lease], QuerySet[Host]) as the
# type checker has them (mypy --strict); django-stubs' documented place is the settings module.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("GPUPOOL_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)


DEBUG = env_bool("DEBUG", False)
# Type checking imports these settings (django-stubs' mypy plugin): it must not start servers.
_CHECKING_TYPES = "mypy" in sys.modules
DATABASE_URL = env_str("DATABASE_URL") or (
    "postgres://postgres@localhost/gpupool" if _CHECKING_TYPES else embedded.postgres_url(VAR_DIR))


def _database(url: str) -> dict[str, Any]:
    """The DATABASES entry of DATABASE_URL: one server, or several (a libpq multi-host URL for a
    PostgreSQL HA cluster; core/database_url.py). A URL it cannot read stops the start, saying why."""
    try:
        return parse_database_url(url, conn_max_age=env_int("DB_CONN_MAX_AGE", 60), conn_health_checks=True)
    except DatabaseUrlError as error:
        raise ImproperlyConfigured(str(error)) from None


# Here, before the secret key is chosen: whether the database is on this machine decides it.
# CONN_MAX_AGE: a connection serves requests for a minute; the health check before each request's
# first query replaces one that a restart or a failover cut (the API answers 503 meanwhile).
DATABASES = {"default": _database(DATABASE_URL)}


def _secret_key() -> str:
    """SECRET_KEY from the environment. Embedded and single-machine runs keep a generated one
    under var/. With DEBUG off and the database on another machine (a real deployment: several
    hosts or containers, each with its own var/), a missing SECRET_KEY stops the start, since each
    process would sign sessions and CSRF tokens with a different key."""
    configured = env_str("SECRET_KEY")
    if configured:
        return configured
    if not DEBUG and not is_local(DATABASES["default"]):
        where = ", ".join(host for host, _ in hosts(DATABASES["default"]))
        raise ImproperlyConfigured(
            f"SECRET_KEY is required: DEBUG is off and the database ({where}) is on "
            "another machine, so every web server and worker must share one key. Set SECRET_KEY (or "
            "SECRET_KEY_FILE) to a long random string, e.g. `python -c 'import secrets; "
            "print(secrets.token_urlsafe(50))'`.")
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# --- behind TLS ---------------------------------------------------------------------------------
# GPUPOOL_TLS=1: users reach gpupool over HTTPS, usually through a proxy or ingress that ends TLS
# and sets X-Forwarded-Proto (trust it only where that proxy is the sole way in). Cookies are then
# sent over HTTPS only, browsers are told to use HTTPS (HSTS), and plain HTTP is redirected, except
# the probes and the scrape that the cluster makes over plain HTTP.
TLS = env_bool("GPUPOOL_TLS", False)
if TLS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("GPUPOOL_SSL_REDIRECT", True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz/?$", r"^metrics/?$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("GPUPOOL_HSTS_SECONDS", 365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("GPUPOOL_HSTS_INCLUDE_SUBDOMAINS", True)
    # Preload lists are hard to leave: opt in only on purpose (check --deploy notes it, W021).
    SECURE_HSTS_PRELOAD = env_bool("GPUPOOL_HSTS_PRELOAD", False)
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",  # intcomma: the dashboard's numbers with thousands separators
    "rest_framework",
    # rest_framework.authtoken is gone: core's ApiToken replaced it (hashed keys; core migration
    # 0002 moved the old keys over and dropped their plain-text table).
    "django_filters",
    "drf_spectacular",
    "core",
    "inventory",
    "allocation",
    "history",
    "frontend",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "pool.urls"
WSGI_APPLICATION = "pool.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "frontend.context_processors.roles",
            ],
        },
    },
]

# --- database -----------------------------------------------------------------------------------
# DATABASES: with DATABASE_URL at the top (the secret key depends on where the database is).
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- broker and cache ---------------------------------------------------------------------------
# One server (REDIS_URL) or a Sentinel group (REDIS_SENTINELS, REDIS_MASTER_NAME): core.redis_clients
# reads the variables once, here, and every Redis user (broker, cache, event stream, watch feed)
# asks it for a client. REDIS_URL is the server's URL, or the group in words (no passwords).
REDIS_TARGET = target_from_env(env_str, lambda: "redis://localhost:6379/0" if _CHECKING_TYPES
                               else embedded.redis_url(VAR_DIR))
REDIS_URL = REDIS_TARGET.display()
CELERY_BROKER_URL = REDIS_TARGET.broker_url()
# An unacknowledged message (acks_late: its worker died) is delivered again after this. One
# value for every queue in kombu's Redis transport, and it must exceed the longest countdown a
# task is sent with (a failed stop retried every 30 min, allocation.workloads.stopping) plus the
# longest task run (unbind: 960 s), or Redis hands out again a message still held. The scheduling
# pass does not wait on it: acknowledged on receipt, it is replaced by the periodic pass
# (allocation.tasks.schedule_pass; tests/allocation/test_task_delivery.py).
# With Sentinel: the master's name (and the sentinels' password) for kombu's sentinel:// transport.
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {"visibility_timeout": 3600,
                                                      **REDIS_TARGET.broker_transport_options()}
# Short socket timeouts: a Redis that hangs must not hang requests (the cache fails open).
# `target`: where the cache's client connects (core.cache; a URL in LOCATION alone also works).
CACHES = {"default": {"BACKEND": "core.cache.RedisCache",  # Django's, keeping one client per pool
                      "LOCATION": REDIS_URL, "KEY_PREFIX": "gpupool",
                      "OPTIONS": {"socket_connect_timeout": 1.0, "socket_timeout": 2.0, "target": REDIS_TARGET}}}

CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# Celery's Django fixup closes every database connection before and after each task unless this
# is set (then it closes them every 2 × N tasks). A closed connection costs the next task a new
# PostgreSQL backend (a fork, cold catalog caches, every prepared statement prepared again): one
# a scheduling pass, 1,800 in one Kueue benchmark run. Workers recycle their connections by
# Django's own rules instead (CONN_MAX_AGE, the health check after an error): pool.celery.
CELERY_DB_REUSE_MAX = 1_000_000_000
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "gpupool"
# Scheduling passes have a queue and a worker of their own, so a pass never waits behind
# discovery, binding or observation (tasks that wait on SSH and Kubernetes for seconds).
SCHEDULE_QUEUE = "gpupool.schedule"
CELERY_TASK_ROUTES = {"allocation.schedule_pass": {"queue": SCHEDULE_QUEUE},
                      "allocation.relay_lease_events": {"queue": SCHEDULE_QUEUE}}
# Several beats may run (replicas, or `worker -B`): only the one holding a PostgreSQL advisory lock
# sends, and each run is claimed in the database first (core/beat.py). Its state is in the
# database, so the schedule file below is no longer written; it stays for an explicit -S.
CELERY_BEAT_SCHEDULER = "core.beat:LeaderScheduler"
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Reconnect to a broker that is down for as long as it takes (every 2 s at most, pool.celery):
# Celery's default gives up after 100 attempts and stops the worker.
CELERY_BROKER_CONNECTION_MAX_RETRIES = None

# --- gpupool ------------------------------------------------------------------------------------
class GpupoolSettings(TypedDict):
    """The type of GPUPOOL, so `settings.GPUPOOL["KEY"]` reads as its own type, not a union."""

    AUTOSCHEDULE: bool
    FERNET_KEY: str | None
    DEFAULT_TTL_S: int
    MAX_TTL_S: int
    PASS_INTERVAL_S: int
    DISCOVERY_INTERVAL_S: int
    OFFLINE_AFTER_INTERVALS: int
    LOST_GRACE_S: int
    OBSERVE_INTERVAL_S: int
    SAMPLE_INTERVAL_S: int
    TELEMETRY_HISTORY: int
    HISTORY_MINUTE_HOURS: int
    HISTORY_HOUR_DAYS: int
    POLICY: str
    PREPARED_STATEMENTS: bool
    LEASE_FAST_PATH: bool
    OUTBOX_RELAY_THREAD: bool
    BEAT_LEASE_S: int
    IDLE_BELOW_UTIL_PCT: int
    IDLE_FOR_S: int


GPUPOOL: GpupoolSettings = {
    # Run a scheduling pass at once on lease events; 0 leaves it to beat and `manage.py schedule`.
    "AUTOSCHEDULE": env_bool("GPUPOOL_AUTOSCHEDULE", True),
    # Encrypts SSH private keys stored in the database (Fernet, urlsafe base64 32 bytes).
    "FERNET_KEY": env_str("GPUPOOL_FERNET_KEY"),
    "DEFAULT_TTL_S": env_int("GPUPOOL_DEFAULT_TTL_S", 3600),
    "MAX_TTL_S": env_int("GPUPOOL_MAX_TTL_S", 7 * 24 * 3600),
    "PASS_INTERVAL_S": env_int("GPUPOOL_PASS_INTERVAL_S", 10),
    "DISCOVERY_INTERVAL_S": env_int("GPUPOOL_DISCOVERY_INTERVAL_S", 60),
    # A host not heard from for this many discovery intervals is offline.
    "OFFLINE_AFTER_INTERVALS": env_int("GPUPOOL_OFFLINE_AFTER_INTERVALS", 3),
    # Leases on an offline host become `lost` after this grace.
    "LOST_GRACE_S": env_int("GPUPOOL_LOST_GRACE_S", 300),
    "OBSERVE_INTERVAL_S": env_int("GPUPOOL_OBSERVE_INTERVAL_S", 15),
    # Per-GPU telemetry history: one sample per source every SAMPLE_INTERVAL_S, kept for
    # TELEMETRY_HISTORY samples (the latest value is always on the GPU row).
    "SAMPLE_INTERVAL_S": env_int("GPUPOOL_SAMPLE_INTERVAL_S", 60),
    "TELEMETRY_HISTORY": env_int("GPUPOOL_TELEMETRY_HISTORY", 240),
    # The time series store (history/): 1-minute points kept this many hours, hourly points
    # (and per-GPU hourly telemetry) this many days.
    "HISTORY_MINUTE_HOURS": env_int("GPUPOOL_HISTORY_MINUTE_HOURS", 24),
    "HISTORY_HOUR_DAYS": env_int("GPUPOOL_HISTORY_HOUR_DAYS", 90),
    "POLICY": env_str("GPUPOOL_POLICY", "fair"),
    # Hot lease statements as server-side prepared statements (core/db/statements.py); set 0 behind a
    # pooler in transaction mode (PgBouncer), where a session's prepared statements do not follow.
    "PREPARED_STATEMENTS": env_bool("GPUPOOL_DB_PREPARE", True),
    # The hot lease requests (create, read, release, renew) answered without Django's middleware
    # and DRF's request/response machinery (allocation/api/fast/); 0: every request the generic way.
    "LEASE_FAST_PATH": env_bool("GPUPOOL_LEASE_FAST_PATH", True),
    # Web processes publish lease events from one relay thread each (allocation/outbox_thread.py);
    # 0: each request publishes after its own commit.
    "OUTBOX_RELAY_THREAD": env_bool("GPUPOOL_OUTBOX_RELAY_THREAD", True),
    # A beat leader silent this long (frozen, cut off, its node lost) loses the lead: PostgreSQL ends
    # its session and a standby takes over (core/beat_lock.py). A leader that dies or stops frees it at once.
    "BEAT_LEASE_S": env_int("GPUPOOL_BEAT_LEASE_S", 10),
    # Allocated but idle: a leased GPU below this utilisation (percent) for this long is flagged on
    # the dashboard, in /metrics and in the usage report's idle GPU-hours. A lease under an
    # idle_reclaim rule (its priority class's, else its pool's) is judged by that rule instead.
    "IDLE_BELOW_UTIL_PCT": env_int("GPUPOOL_IDLE_BELOW_UTIL_PCT", 5),
    "IDLE_FOR_S": env_int("GPUPOOL_IDLE_FOR_S", 1800),
}

# --- API ----------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "core.api.auth.CachedTokenAuthentication",  # hashed tokens (core/tokens.py), cached 5 s per process
        "rest_framework.authentication.SessionAuthentication",
    ],
    # TokenScopeAllows: a read-only token may only use safe methods (403 read_only_token).
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated",
                                   "core.api.permissions.TokenScopeAllows"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    # orjson in and out (core/api/renderers.py). The browsable API stays: content negotiation
    # picks it only for browsers (Accept: text/html), so API clients never pay for it.
    "DEFAULT_RENDERER_CLASSES": ["core.api.renderers.JSONRenderer", "rest_framework.renderers.BrowsableAPIRenderer"],
    "DEFAULT_PARSER_CLASSES": ["core.api.renderers.JSONParser", "rest_framework.parsers.FormParser",
                               "rest_framework.parsers.MultiPartParser"],
    "DEFAULT_PAGINATION_CLASS": "core.api.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.errors.exception_handler",
    "DEFAULT_THROTTLE_RATES": {"lease_create": env_str("GPUPOOL_LEASE_RATE", "600/min")},
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # request bodies are bounded: 1 MiB

SPECTACULAR_SETTINGS = {
    "TITLE": "gpupool API",
    "DESCRIPTION": "One pool of GPUs across SSH-reached VMs and Kubernetes: inventory, leases, quotas.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Request bodies say what core.api.strict enforces: no field beyond those named.
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "core.api.schema.strict_request_bodies"],
    # One schema component per status vocabulary, named after it (several fields share them).
    "ENUM_NAME_OVERRIDES": {
        "HostStateEnum": "inventory.choices.HostState",
        "GpuStateEnum": "inventory.choices.GpuState",
        "LeaseStateEnum": "allocation.choices.LeaseState",
        "TopologyModeEnum": "allocation.policy.topology.MODES",
        "ModeEnum": "allocation.selectors.capacity_preview.MODES",  # as before topology brought a second `mode`
    },
}

# --- single sign-on: OpenID Connect (docs/sso.md) -------------------------------------------------
# Off while GPUPOOL_OIDC_ISSUER is unset: the user name and password form is then the only login.
# On: the login page offers "Sign in with SSO" (the password form stays, for local accounts), and
# `POST /api/v1/auth/device/` starts the CLI's device login. Which claims name the user and which
# groups give teams and the admin role is the `sso:` section of the YAML configuration.
class OidcSettings(TypedDict):
    ISSUER: str | None         # the issuer URL, or its discovery document's URL
    CLIENT_ID: str | None
    CLIENT_SECRET: str | None  # None: a public client (PKCE only)
    SCOPES: str
    REDIRECT_URI: str | None   # None: this server's /login/sso/callback/ as the request reaches it
    LABEL: str                 # "Sign in with LABEL"
    TIMEOUT_S: float           # each call to the identity provider
    TOKEN_DAYS: int            # lifetime of the API token a device login issues
    RATE: str                  # anonymous device-login calls per client address


OIDC: OidcSettings = {
    "ISSUER": env_str("GPUPOOL_OIDC_ISSUER"),
    "CLIENT_ID": env_str("GPUPOOL_OIDC_CLIENT_ID"),
    "CLIENT_SECRET": env_str("GPUPOOL_OIDC_CLIENT_SECRET"),
    "SCOPES": env_str("GPUPOOL_OIDC_SCOPES", "openid profile email"),
    "REDIRECT_URI": env_str("GPUPOOL_OIDC_REDIRECT_URI"),
    "LABEL": env_str("GPUPOOL_OIDC_LABEL", "SSO"),
    "TIMEOUT_S": env_int("GPUPOOL_OIDC_TIMEOUT_S", 10),
    "TOKEN_DAYS": env_int("GPUPOOL_OIDC_TOKEN_DAYS", 7),
    "RATE": env_str("GPUPOOL_OIDC_RATE", "120/min"),
}
if OIDC["ISSUER"] and not OIDC["CLIENT_ID"]:
    raise ImproperlyConfigured("GPUPOOL_OIDC_ISSUER is set but GPUPOOL_OIDC_CLIENT_ID is not: single sign-on "
                               "needs the client id this server is registered under at the identity provider")
if OIDC["ISSUER"] and "openid" not in OIDC["SCOPES"].split():
    raise ImproperlyConfigured(f"GPUPOOL_OIDC_SCOPES must include 'openid', got {OIDC['SCOPES']!r}")

# --- static, auth, i18n -------------------------------------------------------------------------
STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"
# Notifications by e-mail (allocation/notify) go through Django's SMTP backend.
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "gpupool@localhost")
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
