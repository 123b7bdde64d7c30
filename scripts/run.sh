#!/usr/bin/env bash
# Run: migrate, load the demo fleet, start web + Celery workers + beat; Ctrl-C stops all.
# With no DATABASE_URL / REDIS_URL it starts the embedded PostgreSQL and Redis under var/
# (core/embedded.py) and stops them on Ctrl-C; set both to run against your own servers.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-8000}"
# Loopback unless told otherwise: the banner prints the admin login, and the demo's passwords are known.
BIND="${GPUPOOL_BIND:-127.0.0.1}"
PY=.venv/bin/python
export DJANGO_SETTINGS_MODULE=pool.settings
VAR="${GPUPOOL_VAR_DIR:-var}"  # where settings keep state, logs and the embedded engines
mkdir -p "$VAR/log"

embedded=()
[ -n "${DATABASE_URL:-}" ] || embedded+=(PostgreSQL)
[ -n "${REDIS_URL:-}" ] || [ -n "${REDIS_SENTINELS:-}" ] || embedded+=(Redis)
# Resolved once here, so every process below gets the same URLs without looking them up again.
eval "$($PY -m core.embedded env)"

# Migrate, apply examples/demo.yaml, discover, demo passwords: one process, the login last.
prepared=$($PY manage.py demo examples/demo.yaml)
echo "$prepared" | sed '$d'
LOGIN=$(echo "$prepared" | tail -1)

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo; echo "stopping gpupool..."
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ ${#embedded[@]} -gt 0 ]; then $PY -m core.embedded stop >/dev/null || true; fi
}
trap cleanup INT TERM EXIT

.venv/bin/celery -A pool worker --loglevel INFO --concurrency 2 -Q gpupool -n "gpupool@%h" \
  >"$VAR/log/worker.log" 2>&1 &
pids+=($!)
# Scheduling passes run in a worker of their own: they never wait behind slow tasks. Its processes
# pass different pools at once (a pool busy in one is handed over, never waited for: allocation/engine/handoff.py).
.venv/bin/celery -A pool worker --loglevel INFO --concurrency "${GPUPOOL_SCHEDULER_PROCESSES:-2}" \
  --prefetch-multiplier 1 -Q gpupool.schedule -n "scheduler@%h" \
  >"$VAR/log/scheduler.log" 2>&1 &
pids+=($!)
.venv/bin/celery -A pool beat --loglevel INFO \
  >"$VAR/log/beat.log" 2>&1 &
pids+=($!)
# The tuned web server (pool/gunicorn_conf.py): a process per core, the fast lease path on.
.venv/bin/gunicorn -c python:pool.gunicorn_conf pool.asgi:application --bind "${BIND}:${PORT}" \
  --access-logfile "$VAR/log/access.log" --error-logfile "$VAR/log/web.log" &
pids+=($!)

case "$BIND" in 0.0.0.0|::|localhost) probe=127.0.0.1 ;; *) probe="$BIND" ;; esac
for _ in $(seq 1 120); do
  if $PY - "$probe" "$PORT" <<'PYEOF' 2>/dev/null; then break; fi
import sys, urllib.request
urllib.request.urlopen(f"http://{sys.argv[1]}:{sys.argv[2]}/healthz", timeout=1)
PYEOF
  sleep 0.5
done

# What it runs on, read from the URLs every process got (passwords left out).
where() {
  $PY - "$1" "$2" "$VAR" <<'PYEOF'
import sys
from urllib.parse import unquote, urlsplit
url, embedded, var = urlsplit(sys.argv[1]), sys.argv[2] == "1", sys.argv[3]
host = unquote(url.netloc.rpartition("@")[2])
if url.scheme == "unix" or host.startswith("/"):
    place = "a Unix socket"
else:
    place = f"{url.hostname}:{url.port}" if url.port else str(url.hostname)
if url.scheme.startswith("postgres"):
    place += f", database {url.path.lstrip('/')}"
print(f"embedded, under {var}/ ({place})" if embedded else place)
PYEOF
}
db_embedded=0; [[ " ${embedded[*]} " == *" PostgreSQL "* ]] && db_embedded=1
redis_embedded=0; [[ " ${embedded[*]} " == *" Redis "* ]] && redis_embedded=1
db_line="PostgreSQL $(where "${DATABASE_URL:-}" "$db_embedded")"
if [ -n "${REDIS_URL:-}" ]; then redis_line="Redis $(where "$REDIS_URL" "$redis_embedded")"; else redis_line="Redis via Sentinel (REDIS_SENTINELS)"; fi
[ "$db_embedded" = 1 ] || db_line="$db_line  (from DATABASE_URL)"
[ "$redis_embedded" = 1 ] || [ -z "${REDIS_URL:-}" ] || redis_line="$redis_line  (from REDIS_URL)"
if [ "$BIND" = 127.0.0.1 ] || [ "$BIND" = localhost ] || [ "$BIND" = ::1 ]; then
  reach="this machine only (GPUPOOL_BIND=0.0.0.0 serves others)"
else
  reach="every interface matching $BIND: change the demo passwords first"
fi
cat <<TXT

  gpupool is running.
  Database:   ${db_line}
  Queue:      ${redis_line}
  Listening:  ${BIND}:${PORT}, ${reach}
  Dashboard:  http://localhost:${PORT}/
  Login:      ${LOGIN}
  API:        http://localhost:${PORT}/api/v1/   docs: http://localhost:${PORT}/api/docs/
  API token:  .venv/bin/python manage.py apitoken alice
  Logs:       $VAR/log/{web,worker,beat}.log      Ctrl-C stops everything.

TXT
wait -n "${pids[@]}" || true
