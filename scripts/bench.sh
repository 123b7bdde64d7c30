#!/usr/bin/env bash
# Run every benchmark in bench/ (each prints its own figures, with a baseline from the same run).
set -uo pipefail
cd "$(dirname "$0")/.."
export DJANGO_SETTINGS_MODULE=pool.settings GPUPOOL_AUTOSCHEDULE=0
status=0
for bench in bench/bench_*.py; do
  echo "== $bench"
  .venv/bin/python "$bench" "$@" || status=1
done
exit $status
