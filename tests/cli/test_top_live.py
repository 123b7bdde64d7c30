"""`gpupool top` on a terminal: full screen, cut to the terminal's height (the queue says how many
more it does not show), re-sorted by a key, and `q` quits with exit 0."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from typing import Any

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def _read_until(fd: int, text: str, seen: list[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while text not in "".join(seen):
        left = deadline - time.monotonic()
        assert left > 0, f"{text!r} never shown:\n{''.join(seen)[-2000:]}"
        if select.select([fd], [], [], left)[0]:
            try:
                seen.append(os.read(fd, 65536).decode(errors="replace"))
            except OSError:
                break


def test_top_fits_the_terminal_resorts_on_a_key_and_quits_on_q(server: Any) -> None:
    for _ in range(30):  # a queue longer than the screen
        server.run("request", "--pool", "training", "--gpus", "1", "-o", "json")
    leader, follower = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # 24 rows, 120 columns
    proc = subprocess.Popen([sys.executable, "-m", "gpupool_cli", "top", "--interval", "1"], stdin=follower,
                            stdout=follower, stderr=subprocess.PIPE, env=server.env(TERM="xterm-256color"))
    os.close(follower)
    seen: list[str] = []
    try:
        _read_until(leader, "sorted by position", seen)
        _read_until(leader, "more", seen)  # 30 pending rows do not fit in 24 lines
        os.write(leader, b"g")
        _read_until(leader, "sorted by gpus", seen)
        os.write(leader, b"q")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
