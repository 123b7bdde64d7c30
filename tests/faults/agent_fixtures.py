"""Helpers for the agent-fault and clock-skew scenarios (tests/faults/test_ssh_faults.py,
test_k8s_faults.py, test_clock_skew.py): figures each scenario prints and writes, processes with a
shifted clock (libfaketime), and counting what a fault may have duplicated.

Imported by those modules (not a conftest: the rest of tests/faults/ has its own harness).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stacktools.processes import REPO
from tests.support.processes import process_env

ARTIFACTS = REPO / "test-artifacts" / "faults"


@dataclass
class Figures:
    """A scenario's figures: printed at the end of the test and written to
    `test-artifacts/faults/<scenario>.json` (the README table is built from them)."""

    scenario: str
    values: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def __setitem__(self, key: str, value: Any) -> None:
        self.values[key] = value

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def add(self, key: str, amount: int = 1) -> None:
        self.values[key] = self.values.get(key, 0) + amount

    def write(self) -> Path:
        self.values["wall_s"] = round(time.monotonic() - self.started, 2)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.scenario}.json"
        path.write_text(json.dumps({"scenario": self.scenario, **self.values}, indent=2, default=str) + "\n")
        print(f"\n[fault figures] {self.scenario}: " + ", ".join(f"{k}={v}" for k, v in self.values.items()))
        return path


# --- shifted clocks (libfaketime) ----------------------------------------------------------------


def libfaketime() -> str | None:
    """The path of libfaketime (Debian package `faketime`), or None when it is not installed."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1") + glob.glob("/usr/lib/faketime/libfaketime.so.1"))
    return found[0] if found else None


def faketime_missing_reason() -> str | None:
    if libfaketime() is None:
        return "libfaketime is absent (apt-get install -y faketime; scripts/test.sh installs it as root)"
    return None


def skewed_env(offset: str, **extra: str) -> dict[str, str]:
    """The environment of a gpupool process (test database, settings) whose wall clock is
    shifted by `offset` (libfaketime syntax: "+5m", "-300s"), as on a host whose NTP is off.
    libfaketime shifts the monotonic clock by the same constant, so timeouts keep their length
    (FAKETIME_DONT_FAKE_MONOTONIC would break Python's time.sleep: libfaketime 0.9.10 then
    hands clock_nanosleep an absolute monotonic deadline it cannot use, EINVAL)."""
    library = libfaketime()
    assert library, faketime_missing_reason()
    preload = " ".join(filter(None, [library, os.environ.get("LD_PRELOAD", "")]))
    return {"LD_PRELOAD": preload, "FAKETIME": offset, "FAKETIME_NO_CACHE": "1", **extra}


_RUN_SKEWED = """
import json, sys, time
import django
django.setup()
from importlib import import_module
from core.db import db_now
module, name = sys.argv[1].rsplit(".", 1)
before = time.time(), db_now().timestamp()
result = getattr(import_module(module), name)()
print("@@result " + json.dumps({"python_clock": before[0], "db_clock": before[1], "result": result}, default=str))
"""


def run_skewed(offset: str, function: str, timeout: float = 60) -> dict[str, Any]:
    """Call `function` (a dotted path, no arguments) in a separate gpupool process whose clock is
    shifted by `offset`; returns {"python_clock", "db_clock", "result"} (the process's own time,
    the database's at the same moment, and what the function returned)."""
    done = subprocess.run([sys.executable, "-c", _RUN_SKEWED, function], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=process_env(**skewed_env(offset)))
    for line in done.stdout.splitlines():
        if line.startswith("@@result "):
            return dict(json.loads(line[len("@@result "):]))
    raise AssertionError(f"{function} under FAKETIME={offset} failed ({done.returncode}):\n{done.stderr[-3000:]}")
