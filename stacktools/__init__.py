"""gpupool as real processes, for the benchmarks (bench/) and the tests (tests/faults, tests/watch,
tests/integration): the command lines of the web server, the Celery workers and beat written once
(as scripts/run.sh starts them), a restartable process handle, and the waits for readiness.

Development tooling, not shipped: it imports nothing of the project (its processes are started by
command line), so bench and tests may both use it without importing each other.
"""
