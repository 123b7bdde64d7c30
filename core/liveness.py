"""Liveness by heartbeat file: a process touches a file while its own loop turns, and its pod's
probe checks how old the file is (`python -m core.liveness --max-age 60`, exit 1 when stale).

Why not `celery inspect ping`: it starts a Python process that imports Celery and Django (seconds of
CPU on a busy node, every period), asks over the broker and waits for a reply. So it is slow, it
costs more than the worker it checks, and it fails whenever Redis does: a Redis outage would
restart every worker at once, which mends nothing. A heartbeat costs a syscall a second, and it
says what a liveness probe should say: whether the process is stuck, not whether its dependencies
are up (readiness and the fault suite cover those).

Who stamps, only where `GPUPOOL_ALIVE_FILE` names the file (the Helm chart sets it):
- a Celery worker: a timer on the worker's own event loop (pool.celery), so a wedged loop goes
  stale; and every second while it waits for the broker (pool.celery.BrokerConnection), since
  waiting for Redis is not being stuck;
- beat: every tick of its scheduler (core.beat), leader and standby alike; a tick's database calls
  are bounded by timeouts, so a tick always ends.

Stdlib only: the probe runs this module in a fresh interpreter every period.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

#: The variable naming the heartbeat file (unset: nothing is stamped).
ENV = "GPUPOOL_ALIVE_FILE"
#: At most one touch per this many seconds, however often the loop turns.
MIN_GAP_S = 1.0
#: The probe's default: a heartbeat older than this means the process is stuck.
DEFAULT_MAX_AGE_S = 60.0

logger = logging.getLogger("gpupool.liveness")
_last_stamp = float("-inf")


def stamp() -> None:
    """Touch the heartbeat file (at most once per MIN_GAP_S); nothing when `GPUPOOL_ALIVE_FILE` is
    unset. A file that cannot be written is logged, never raised: the probe will say so."""
    global _last_stamp
    path = os.environ.get(ENV)
    now = time.monotonic()
    if not path or now - _last_stamp < MIN_GAP_S:
        return
    _last_stamp = now
    try:
        Path(path).touch()
    except OSError as error:
        logger.warning("liveness: cannot touch %s: %s", path, error)


def heartbeat_age(path: str | Path, now: float | None = None) -> float | None:
    """Seconds since the file at `path` was last touched (by the wall clock, as its mtime is);
    None when there is no such file (the process has not stamped yet)."""
    try:
        mtime = Path(path).stat().st_mtime
    except FileNotFoundError:
        return None
    return (time.time() if now is None else now) - mtime


def main(argv: list[str] | None = None) -> int:
    """The probe: 0 when the heartbeat is at most --max-age seconds old, 1 (and why, on stdout,
    which the kubelet records in the pod's events) when it is older, missing or unnamed."""
    parser = argparse.ArgumentParser(prog="python -m core.liveness", description=__doc__.splitlines()[0])
    parser.add_argument("--max-age", type=float, default=DEFAULT_MAX_AGE_S, help="seconds (default: %(default)s)")
    parser.add_argument("--file", default=os.environ.get(ENV), help=f"the heartbeat file (default: ${ENV})")
    args = parser.parse_args(argv)
    if not args.file:
        print(f"no heartbeat file: set {ENV} or --file")
        return 1
    age = heartbeat_age(args.file)
    if age is None:
        print(f"no heartbeat yet ({args.file} does not exist)")
        return 1
    if age > args.max_age:
        print(f"stuck: last heartbeat {age:.0f} s ago (over {args.max_age:g} s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
