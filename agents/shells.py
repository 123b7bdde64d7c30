"""Shells on a lease's GPUs: the capability a source kind has when its users may log in to a
lease's host for the lease's life (ssh sources do; a Kubernetes pod is reached by exec instead).

Kept apart from `agents.base.Connector`, whose verbs every kind implements: only some kinds have
hosts a user can log in to. `allocation.services.shells` asks `isinstance(connector, ShellHost)`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ShellLogin:
    """Where a user's ssh client logs in with a key authorised for a lease: the host's address
    and port, the account, and the host key to trust (a `known_hosts` key, "" when unknown)."""

    address: str
    port: int
    user: str
    host_key: str = ""


class ShellHost(ABC):
    """A source kind whose hosts accept a user's own key for a lease's life.

    The keys of a lease go when its workload is stopped (`Connector.unbind`), with every shell
    they opened: a lease's end never leaves a login to its GPUs behind. Both verbs raise
    `agents.base.AgentError` (permanent: retrying cannot help)."""

    @abstractmethod
    def authorize_key(self, handle: Mapping[str, Any], *, key_id: str, public_key: str,
                      gpu_uuids: Sequence[str]) -> ShellLogin:
        """Let `public_key` (an OpenSSH public key line) log in to the bound lease `handle` names,
        into a shell with CUDA_VISIBLE_DEVICES = `gpu_uuids`, until the lease's workload is
        stopped or `revoke_key` takes it back. Idempotent. A lease that has already ended on the
        host raises a permanent AgentError whose message says so."""

    @abstractmethod
    def revoke_key(self, handle: Mapping[str, Any], *, key_id: str) -> None:
        """Take back one key (its open shells go on until the lease ends). Idempotent."""


#: The words of the permanent error `authorize_key` raises for a lease that ended on its host.
LEASE_ENDED = "the lease has ended on its host"


# --- a command in a workload's container (Kubernetes exec) --------------------------------------

STDOUT, STDERR = 1, 2


class ExecSession(ABC):
    """A command running in a lease's container, started by `PodExec.exec`.

    `read` is called from one thread; `write`, `close_stdin`, `resize` and `close` may come from
    another (the server's receiver). Once `ended`, `exit_code` is the command's (None when it
    could not be told) and `message` says why when it was not 0."""

    ended: bool = False
    exit_code: int | None = None
    message: str = ""

    @abstractmethod
    def read(self, timeout: float) -> list[tuple[int, bytes]]:
        """What the command wrote since, as (STDOUT or STDERR, bytes), waiting at most `timeout`
        seconds for the first of it; [] when nothing came. Sets `ended` when it has ended."""

    @abstractmethod
    def write(self, data: bytes) -> None:
        """Send `data` to the command's stdin (a session opened with `stdin`)."""

    @abstractmethod
    def close_stdin(self) -> None:
        """End the command's stdin (EOF), where the API server's protocol allows it."""

    @abstractmethod
    def resize(self, width: int, height: int) -> None:
        """The terminal's new size (a session opened with `tty`)."""

    @abstractmethod
    def close(self) -> None:
        """End the session (the command gets a hangup); idempotent."""


class PodExec(ABC):
    """A source kind whose workloads run commands on request (`kubectl exec`)."""

    @abstractmethod
    def exec(self, handle: Mapping[str, Any], command: Sequence[str], *, tty: bool, stdin: bool) -> ExecSession:
        """Start `command` in the workload's (first) container. Raises AgentError: permanent when
        the workload is gone or not running, transient when its API server could not be reached."""
