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
