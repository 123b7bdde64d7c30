"""The installed console script `gpupool` works as a separate process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.django_db(transaction=True)
def test_the_gpupool_console_script_lists_pools_and_fails_cleanly(server, tmp_path) -> None:
    script = Path(sys.executable).parent / "gpupool"
    if not script.exists():
        pytest.skip("console script not installed (pip install -e .)")
    env = {**os.environ, "GPUPOOL_URL": server.url, "GPUPOOL_TOKEN": server.token,
           "GPUPOOL_CONFIG": str(tmp_path / "none.json")}
    ok = subprocess.run([str(script), "pools"], env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "training" in ok.stdout, ok.stderr
    bad = subprocess.run([str(script), "show", "nope!"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr == "error: not a lease id: 'nope!' (usage)\n"
