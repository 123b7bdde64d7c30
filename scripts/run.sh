#!/usr/bin/env bash
# Run: migrate, load the demo fleet, start web + Celery workers + beat; Ctrl-C stops all.
# With no DATABASE_URL / REDIS_URL it starts the embedded PostgreSQL and Redis under var/
# (core/embedded.py) and stops them on Ctrl-C; set both to run against your own servers.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-8000}"
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
.venv/bin/gunicorn pool.asgi:application -k uvicorn_worker.UvicornWorker --bind "0.0.0.0:${PORT}" --workers 2 \
  --access-logfile "$VAR/log/access.log" --error-logfile "$VAR/log/web.log" &
pids+=($!)

for _ in $(seq 1 120); do
  if $PY - "$PORT" <<'PYEOF' 2>/dev/null; then break; fi
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/healthz", timeout=1)
PYEOF
  sleep 0.5
done

if [ ${#embedded[@]} -gt 0 ]; then engines="embedded ${embedded[*]} under $VAR/"; else engines="on your PostgreSQL and Redis"; fi
cat <<TXT

  gpupool is running (${engines}).
  Dashboard:  http://localhost:${PORT}/
  Login:      ${LOGIN}
  API:        http://localhost:${PORT}/api/v1/   docs: http://localhost:${PORT}/api/docs/
  API token:  .venv/bin/python manage.py apitoken alice
  Logs:       $VAR/log/{web,worker,beat}.log      Ctrl-C stops everything.

TXT
wait -n "${pids[@]}" || true
