"""A process workload's log, read over SSH: the reading side of `agents.ssh_scripts.logs_script`.

One SSH session per stream, kept for its whole life: the script runs on one channel and its
output is passed on as it arrives (the window, then, when following, what the workload writes
next). The last `tail` lines are found here, not with `tail -n` on the host, so that the window
and what follows it come from one file descriptor with no line lost or doubled between them:
the script sends the last 64 KiB (or more), and when they hold fewer lines than asked the window
grows (x16, up to 64 MiB) on a new channel of the same session.

Reads wait at most `POLL_S` at a time, so that `LogStream.close()` from another thread (it
closes the session) is noticed at once even when the workload is quiet.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from agents import ssh_scripts
from agents.base import AgentError, LogStream, last_lines
from agents.ssh_session import SshSession

if TYPE_CHECKING:
    import paramiko

POLL_S = 0.5
FIRST_WINDOW = ssh_scripts.LOG_BLOCK
MAX_WINDOW = 64 * 1024 * 1024
#: How long the script may take to say where its window starts (it only opens a file).
STATUS_WAIT_S = 5.0


class _Channel:
    """One run of the script: its stdout as a byte stream, with a small read-ahead buffer."""

    def __init__(self, session: SshSession, script: str, stream: LogStream) -> None:
        self.session = session
        self.stream = stream
        self.channel: paramiko.Channel = session.start(script)
        self.channel.settimeout(POLL_S)
        self.buffer = b""

    def recv(self) -> bytes:
        """The next bytes of stdout (b"" at its end, or once the stream is closed)."""
        if self.buffer:
            buffered, self.buffer = self.buffer, b""
            return buffered
        while not self.stream.closed:
            try:
                data = self.channel.recv(65536)
            except TimeoutError:
                self._drain_stderr()
                continue
            except (OSError, EOFError) as exc:
                if self.stream.closed:
                    return b""
                raise AgentError(f"reading the log on {self.session.host.where} failed: {exc}") from None
            self._drain_stderr()
            return data
        return b""

    def _drain_stderr(self) -> None:
        """Read the heartbeats, so that they never fill the channel's window."""
        while self.channel.recv_stderr_ready():
            self.channel.recv_stderr(65536)

    def header(self, timeout: float) -> list[str]:
        """The script's first line, as words (`@@gpupool window FROM N`, `@@gpupool nolog`)."""
        waited = 0.0
        while b"\n" not in self.buffer:
            if waited >= timeout:
                raise AgentError(f"reading the log on {self.session.host.where}: no answer in {timeout:g} s")
            try:
                data = self.channel.recv(65536)
            except TimeoutError:
                waited += POLL_S
                continue
            except (OSError, EOFError) as exc:
                raise AgentError(f"reading the log on {self.session.host.where} failed: {exc}") from None
            if not data:
                raise AgentError(f"the log reader on {self.session.host.where} ended without a word")
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        words = line.decode("utf-8", "replace").split()
        if words[:1] != [ssh_scripts.MARK]:
            raise AgentError(f"unexpected answer from the log reader on {self.session.host.where}: {line[:200]!r}")
        return words[1:]

    def read_exactly(self, count: int) -> bytes:
        parts, left = [], count
        while left > 0:
            data = self.recv()
            if not data:
                break
            if len(data) > left:
                data, self.buffer = data[:left], data[left:]
            parts.append(data)
            left -= len(data)
        return b"".join(parts)

    def exit_status(self) -> int | None:
        """The script's exit status once its output has ended; None when the connection dropped
        before it said (or the stream was closed)."""
        if not self.channel.status_event.wait(STATUS_WAIT_S):
            return None
        status = self.channel.recv_exit_status()
        return None if status == -1 else status

    def close(self) -> None:
        self.channel.close()


class SshLog(LogStream):
    """The log of one lease over one SSH session, which it owns and closes when it ends."""

    def __init__(self, session: SshSession, *, follow: bool) -> None:
        super().__init__()
        self.session = session
        self.follow = follow
        self.channel: _Channel | None = None
        self.first = b""

    def open(self, lease_dir: str, pid: int, start_time: str, *, tail: int | None, timeout: float) -> None:
        """Start the script with a window large enough for `tail` lines, keeping the part of the
        window to send first (the tail lines; nothing without `tail`: the whole window then
        streams through)."""
        window = FIRST_WINDOW if tail is not None else -1
        where = self.session.host.where
        while True:
            script = ssh_scripts.logs_script(lease_dir, pid, start_time, window=window, follow=self.follow)
            self.channel = channel = _Channel(self.session, script, self)
            words = channel.header(timeout)
            if words[:1] == ["nolog"]:
                raise AgentError(f"the lease's log {lease_dir}/output.log is no longer on {where}", permanent=True)
            if words[:1] != ["window"] or len(words) < 3:
                raise AgentError(f"unexpected answer from the log reader on {where}: {words}")
            start, size = int(words[1]), int(words[2])
            if tail is None:
                return
            lines, enough = last_lines(channel.read_exactly(size), tail)
            if enough or start == 0:
                self.first = lines
                return
            if window >= MAX_WINDOW:  # as many lines as the largest window holds, whole ones only
                self.first = lines.partition(b"\n")[2]
                return
            channel.close()
            window *= 16

    def chunks(self) -> Iterator[bytes]:
        channel = self.channel
        assert channel is not None, "open() first"
        try:
            if self.first:
                yield self.first
            while data := channel.recv():
                yield data
            if self.closed:
                return
            status = channel.exit_status()
            if status is None:
                raise AgentError(f"the connection to {self.session.host.where} dropped while reading the log")
            # The follow loop exits 0 only once the workload has ended.
            self.workload_ended = self.follow and status == 0
        finally:
            self.session.close()

    def interrupt(self) -> None:
        self.session.close()


def open_log(session: SshSession, lease_dir: str, pid: int, start_time: str, *, tail: int | None,
             follow: bool, timeout: float) -> LogStream:
    """The log of the lease in `lease_dir` (its wrapper `pid` with `start_time`), over `session`
    (open; the stream owns it from now on). Raises AgentError before returning when the log
    cannot be read (permanent when it is not on the host)."""
    stream = SshLog(session, follow=follow)
    try:
        stream.open(lease_dir, pid, start_time, tail=tail, timeout=timeout)
    except BaseException:
        session.close()
        raise
    return stream
