"""One bounded SSH session to one host, with its host key pinned.

Used by `agents.ssh`; kept apart so the connector reads as policy and this as plumbing. paramiko is
imported inside functions (STYLE.md #10): importing the agents package must stay cheap.

Every wait is bounded: TCP connect, banner, key exchange and authentication by `connect_timeout`,
a remote command by the caller's `timeout`. Failures become `AgentError` with a sentence a user
can act on; refused host keys and rejected credentials are permanent, everything else transient.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from agents.base import AgentError, RetryableError

if TYPE_CHECKING:
    import paramiko

# What a pinned key's type may be negotiated as: OpenSSH lists RSA keys as `ssh-rsa`, but they
# are offered (and verified) with SHA-2 signatures.
_NEGOTIATED_AS = {
    "ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256"),
    "ssh-ed25519": ("ssh-ed25519",),
    "ecdsa-sha2-nistp256": ("ecdsa-sha2-nistp256",),
    "ecdsa-sha2-nistp384": ("ecdsa-sha2-nistp384",),
    "ecdsa-sha2-nistp521": ("ecdsa-sha2-nistp521",),
}


@dataclass(frozen=True)
class HostSpec:
    """One configured host: where it is, what to call it, and the only key it may present."""

    name: str
    address: str
    port: int
    host_key: str

    @property
    def where(self) -> str:
        return f"{self.address}:{self.port}"


@dataclass(frozen=True)
class PinnedKey:
    key_type: str
    blob: bytes

    @classmethod
    def parse(cls, text: str) -> PinnedKey:
        """Parse `"ssh-ed25519 AAAA... [comment]"` (a known_hosts or .pub line without host).
        Raises ValueError saying what is wrong."""
        parts = (text or "").split()
        if len(parts) < 2:
            raise ValueError("host_key must look like 'ssh-ed25519 AAAA...'")
        key_type, encoded = parts[0], parts[1]
        if key_type not in _NEGOTIATED_AS:
            raise ValueError(f"unsupported host key type {key_type!r}")
        try:
            blob = base64.b64decode(encoded, validate=True)
            (length,) = struct.unpack(">I", blob[:4])
            inner = blob[4 : 4 + length].decode("ascii")
        except (binascii.Error, struct.error, UnicodeDecodeError) as exc:
            raise ValueError(f"host_key is not valid base64 key data: {exc}") from None
        if inner != key_type:
            raise ValueError(f"host_key says {key_type} but its data is a {inner} key")
        return cls(key_type, blob)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.blob)


def fingerprint(blob: bytes) -> str:
    """OpenSSH's `SHA256:...` fingerprint of a public key blob."""
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii")
    return "SHA256:" + digest.rstrip("=")


def load_private_key(*, key_file: str | None = None, private_key: str | None = None) -> Any:
    """A paramiko key from a file path or PEM/OpenSSH text (already decrypted by the caller).
    Raises a permanent AgentError when it cannot be read."""
    import paramiko

    try:
        text = private_key
        if text is None:
            with open(key_file or "", encoding="utf-8") as handle:
                text = handle.read()
    except OSError as exc:
        raise AgentError(f"cannot read SSH key file {key_file!r}: {exc}", permanent=True) from None
    for key_class in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return key_class.from_private_key(io.StringIO(text))
        except (paramiko.SSHException, ValueError, IndexError):
            continue
    raise AgentError("the SSH private key is not an unencrypted Ed25519, ECDSA or RSA key", permanent=True)


@dataclass(frozen=True)
class RunResult:
    exit_status: int | None
    stdout: str
    stderr: str


class SshSession:
    """A connected, authenticated session. Use as a context manager; `run` any number of times.

    Never accepts a host key other than the pinned one, and refuses hosts with none pinned.
    """

    def __init__(self, host: HostSpec, *, user: str, pkey: Any, connect_timeout: float) -> None:
        self.host = host
        self.user = user
        self.pkey = pkey
        self.connect_timeout = connect_timeout
        self._transport: paramiko.Transport | None = None

    def __enter__(self) -> SshSession:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open(self) -> None:
        """Connect, make sure the host shows its pinned key, and authenticate. Does nothing when
        already open. Raises RetryableError when the host dropped the connection mid-handshake
        (sshd's MaxStartups does that under load), AgentError for everything else."""
        if self._transport is not None:
            return
        pinned = self._pinned_key()
        self._transport = self._new_transport(self._connect(), pinned)
        try:
            self._handshake(self._transport, pinned)
            self._authenticate(self._transport)
        except BaseException:
            self.close()
            raise

    def _pinned_key(self) -> PinnedKey:
        try:
            return PinnedKey.parse(self.host.host_key)
        except ValueError as exc:
            raise AgentError(
                f"refusing {self.host.where}: no usable pinned host key ({exc})", permanent=True
            ) from None

    def _connect(self) -> socket.socket:
        host, timeout = self.host, self.connect_timeout
        try:
            sock = socket.create_connection((host.address, host.port), timeout=timeout)
        except ConnectionRefusedError:
            raise AgentError(f"cannot connect to {host.where}: connection refused") from None
        except TimeoutError:
            raise AgentError(f"cannot connect to {host.where}: no answer in {timeout:g}s") from None
        except OSError as exc:
            raise AgentError(f"cannot connect to {host.where}: {exc.strerror or exc}") from None
        # Small request/reply packets: without this, Nagle and delayed ACKs add ~40 ms stalls.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _new_transport(self, sock: socket.socket, pinned: PinnedKey) -> paramiko.Transport:
        import paramiko

        transport = paramiko.Transport(sock)
        # Its own logger name, so that settings can quiet paramiko's tracebacks for failures
        # we report ourselves (a hung host logs one per attempt at ERROR level).
        transport.set_log_channel("agents.ssh.paramiko")
        transport.banner_timeout = transport.handshake_timeout = self.connect_timeout
        transport.auth_timeout = self.connect_timeout
        # Offer only the pinned key's type, so the server must show us that very key.
        transport.get_security_options().key_types = _NEGOTIATED_AS[pinned.key_type]
        return transport

    def _handshake(self, transport: paramiko.Transport, pinned: PinnedKey) -> None:
        import paramiko

        host, timeout = self.host, self.connect_timeout
        try:
            transport.start_client(timeout=timeout)
        except paramiko.ssh_exception.IncompatiblePeer as exc:
            if "host key" in str(exc):
                raise AgentError(
                    f"host key mismatch for {host.where}: expected {pinned.key_type} "
                    f"{pinned.fingerprint}, but the server has no {pinned.key_type} key",
                    permanent=True,
                ) from None
            raise AgentError(f"SSH negotiation with {host.where} failed: {exc}") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            error = RetryableError if _dropped_by_peer(exc) else AgentError
            raise error(f"SSH handshake with {host.where} failed: {exc}") from None
        try:  # start_client returns quietly when its timeout passes mid-negotiation
            got = transport.get_remote_server_key()
        except paramiko.SSHException:
            raise AgentError(f"SSH handshake with {host.where} did not finish within {timeout:g}s") from None
        if got.asbytes() != pinned.blob:
            raise AgentError(
                f"host key mismatch for {host.where}: expected {pinned.key_type} "
                f"{pinned.fingerprint}, got {got.get_name()} {fingerprint(got.asbytes())}; "
                "refusing to connect (update host_key only if the host was really re-keyed)",
                permanent=True,
            )

    def _authenticate(self, transport: paramiko.Transport) -> None:
        import paramiko

        where = self.host.where
        try:
            transport.auth_publickey(self.user, self.pkey)
        except paramiko.AuthenticationException as exc:
            raise AgentError(f"authentication failed for {self.user}@{where}: {exc}", permanent=True) from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise AgentError(f"authentication with {where} did not finish: {exc}") from None

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def run(self, script: str, *, timeout: float) -> RunResult:
        """Run a POSIX sh script (sent on stdin to `/bin/sh -s`, so no shell quoting of the
        script itself is involved, whatever the user's login shell). Waits at most `timeout`
        seconds in all, then raises a transient AgentError. Non-zero exit is not an error."""
        import paramiko

        deadline = time.monotonic() + timeout
        channel = self.start(script)
        try:
            stdout = self._read_all(channel, channel.recv, deadline)
            stderr = self._read_all(channel, channel.recv_stderr, deadline)
            if not channel.status_event.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError
            if channel.recv_exit_status() == -1:
                # The channel closed without an exit status: the host's sshd died or the
                # connection was reset mid-command. Say so, rather than parse cut output.
                raise AgentError(f"connection to {self.host.where} dropped mid-command")
            return RunResult(
                channel.recv_exit_status(),
                stdout.decode("utf-8", "replace"),
                stderr.decode("utf-8", "replace"),
            )
        except TimeoutError:
            raise AgentError(f"command on {self.host.where} did not finish within {timeout:g}s") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise AgentError(f"command on {self.host.where} failed: {exc}") from None
        finally:
            channel.close()

    def start(self, script: str) -> paramiko.Channel:
        """Start a POSIX sh script as `run` does, without waiting for it: the caller reads its
        output from the channel as it comes (a log that is followed) and closes the channel, or
        the session, when done. Raises a transient AgentError when it cannot be started."""
        import paramiko

        if self._transport is None:
            raise AgentError(f"session to {self.host.where} is not open")
        try:
            channel = self._transport.open_session(timeout=self.connect_timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise AgentError(f"cannot open a session on {self.host.where}: {exc}") from None
        try:
            channel.exec_command("/bin/sh -s")
            channel.sendall(script.encode("utf-8"))
            channel.shutdown_write()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            channel.close()
            raise AgentError(f"command on {self.host.where} failed: {exc}") from None
        return channel

    @staticmethod
    def _read_all(channel: paramiko.Channel, recv: Callable[[int], bytes], deadline: float) -> bytes:
        chunks: list[bytes] = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            channel.settimeout(remaining)
            chunk = recv(65536)  # socket.timeout is TimeoutError since Python 3.10
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def _dropped_by_peer(exc: BaseException) -> bool:
    """True when the host closed or reset the connection (paramiko keeps that as the context of
    its own exception); a timeout or a protocol error is not a reason to try again at once."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, EOFError | ConnectionResetError | ConnectionAbortedError | BrokenPipeError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
