#!/usr/bin/env bash
# Run every benchmark in bench/ (each prints its own figures, with a baseline from the same run).
set -uo pipefail
cd "$(dirname "$0")/.."
export DJANGO_SETTINGS_MODULE=pool.settings GPUPOOL_AUTOSCHEDULE=0
# The load generators some benchmarks drive the server with (bench_api, bench_lease_path): wrk,
# from the distribution, where we may install it; those benchmarks say so and stop without it.
if ! command -v wrk >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk) >/dev/null 2>&1 \
    || echo "apt-get install wrk failed: bench_api and bench_lease_path will say so"
fi
status=0
for bench in bench/bench_*.py; do
  echo "== $bench"
  .venv/bin/python "$bench" "$@" || status=1
done
exit $status
