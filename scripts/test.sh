#!/usr/bin/env bash
# The whole suite: lint, migrations check, then pytest on the real parts this machine has.
# Engines: the machine's PostgreSQL and Redis when they answer on 127.0.0.1, else the embedded ones
# (core/embedded.py, under var/test, stopped at the end). Tiers: OpenSSH server, Chromium, libfaketime,
# an OpenID Provider (node).
# Each tier that cannot run is named, with the reason, instead of failing obscurely.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export DJANGO_SETTINGS_MODULE=pool.settings
export GPUPOOL_VAR_DIR="$PWD/var/test"
export GPUPOOL_AUTOSCHEDULE=0
# An embedded engine left running by an interrupted run is stopped before its folder goes.
[ -d var/test ] && $PY -m core.embedded stop "$GPUPOOL_VAR_DIR" >/dev/null 2>&1
rm -rf var/test && mkdir -p var/test test-artifacts
skipped=()

# --- system packages for real-part tests (only where we may install them) ----------------------
want=()
[ -x /usr/sbin/sshd ] || want+=(openssh-server)
command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || want+=(chromium)
# libfaketime: the clock-skew fault test runs processes with their clocks shifted.
compgen -G "/usr/lib/*/faketime/libfaketime.so.1" >/dev/null || want+=(faketime)
# High availability: a Patroni cluster (with etcd and the distribution's PostgreSQL) and a Redis
# Sentinel group; stress-ng loads the machine for the busy-machine runs of the fault suite.
command -v patroni >/dev/null 2>&1 || want+=(patroni)
command -v etcd >/dev/null 2>&1 || want+=(etcd-server)
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || want+=(postgresql)
command -v redis-sentinel >/dev/null 2>&1 || want+=(redis-sentinel)
command -v stress-ng >/dev/null 2>&1 || want+=(stress-ng)
# Single sign-on: the tests' OpenID Provider runs on node (installed below with npm).
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || want+=(nodejs npm)
if [ ${#want[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${want[*]} for the real-part tests..."
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}") \
      >var/test/apt.log 2>&1 || echo "  apt-get failed (see var/test/apt.log); those tiers will skip"
  else
    echo "  not root or no apt-get: cannot install ${want[*]}"
  fi
fi
[ -x /usr/sbin/sshd ] || skipped+=("sshd: /usr/sbin/sshd not installed")
[ -x /usr/bin/chromium ] || skipped+=("browser: /usr/bin/chromium not installed")
compgen -G "/usr/lib/*/faketime/libfaketime.so.1" >/dev/null || skipped+=("clock skew: libfaketime not installed")
command -v patroni >/dev/null 2>&1 && command -v etcd >/dev/null 2>&1 || skipped+=("PostgreSQL HA: patroni or etcd not installed")
command -v redis-sentinel >/dev/null 2>&1 || skipped+=("Redis HA: redis-sentinel not installed")
# node-oidc-provider (tests/support/oidc_provider/, the version package-lock.json pins) from the npm
# registry, once, under var/oidc-provider; the single sign-on tests skip without it.
if oidc=$($PY -m tests.support.oidc install 2>&1); then echo "$oidc"; else
  skipped+=("single sign-on: ${oidc##*$'\n'}"); fi

# --- PostgreSQL and Redis ---------------------------------------------------------------------
# GPUPOOL_TEST_ENGINES=embedded runs the suite on the embedded engines even where servers answer.
machine() { [ "${GPUPOOL_TEST_ENGINES:-}" != embedded ]; }
if [ -z "${DATABASE_URL:-}" ] && machine && $PY - <<'PYEOF' >/dev/null 2>&1; then
import psycopg2
psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname="postgres", connect_timeout=3).close()
PYEOF
  export DATABASE_URL="postgres://postgres@127.0.0.1:5432/gpupool"
fi
# Database 9 keeps test traffic away from a developer's own data in database 0.
if [ -z "${REDIS_URL:-}" ] && [ -z "${REDIS_SENTINELS:-}" ] && machine && \
   $PY -c 'import redis; redis.Redis(host="127.0.0.1", port=6379, db=9, socket_timeout=2).flushdb()' >/dev/null 2>&1; then
  export REDIS_URL="redis://127.0.0.1:6379/9"
fi
engines="machine's"
if [ -z "${DATABASE_URL:-}" ] || { [ -z "${REDIS_URL:-}" ] && [ -z "${REDIS_SENTINELS:-}" ]; }; then
  engines="embedded where none answered"
  eval "$($PY -m core.embedded env)" || { echo "the embedded engines did not start"; exit 1; }
  trap '$PY -m core.embedded stop "$GPUPOOL_VAR_DIR" >/dev/null 2>&1' EXIT
fi

echo "== engines ($engines): database=${DATABASE_URL} redis=${REDIS_URL:-sentinels ${REDIS_SENTINELS:-}}"
status=0
echo "== ruff (lint, complexity ≤ 10)"; .venv/bin/ruff check . || status=1
echo "== mypy"; .venv/bin/mypy . || status=1
# The layers and never-rules of the imports: pyproject.toml [tool.importlinter].
echo "== import-linter (layers, pure policy, no cycles)"; .venv/bin/lint-imports --no-cache --no-logo || status=1
echo "== migrations"; $PY manage.py makemigrations --check --dry-run >/dev/null \
  && echo "migrations are up to date" || { echo "missing migrations"; status=1; }
echo "== pytest"
.venv/bin/pytest "$@"; rc=$?
[ $rc -eq 0 ] || status=1

echo
if [ ${#skipped[@]} -gt 0 ]; then
  echo "== tiers SKIPPED on this machine:"; for s in "${skipped[@]}"; do echo "   - $s"; done
else
  echo "== all tiers ran: PostgreSQL, Redis, OpenSSH server, Chromium, OpenID Provider"
fi
exit $status
