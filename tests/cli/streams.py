"""Reading a `gpupool` process's stderr as it runs: the tests wait for a line before acting."""

from __future__ import annotations

import queue
import subprocess
import threading
import time


class Lines:
    """Every line the process writes on stderr, collected by a thread; `wait_for` blocks until one
    holds a text."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._new: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            self._new.put(line)

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        for line in list(self.lines):
            if text in line:
                return line
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._new.get(timeout=left)
            except queue.Empty:
                break
            if text in line:
                return line
        raise AssertionError(f"no {text!r} on stderr within {timeout} s:\n{self.text}")

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        """Wait for the exit; (exit code, stdout, stderr)."""
        out = self.proc.stdout.read() if self.proc.stdout is not None else ""
        code = self.proc.wait(timeout=timeout)
        time.sleep(0.1)  # the reader thread takes the last lines
        return code, out, self.text
