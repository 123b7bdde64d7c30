"""Shells on a lease's GPUs (`POST/DELETE leases/{id}/ssh-keys/`, `gpupool ssh`): a user's own
public key authorised on the lease's host for the lease's life.

The client makes a key pair for one login and sends the public half; the private half never
leaves the user's machine. A bound lease of an ssh source (a `process`, or a `session` that
starts nothing) may carry keys; the host's account then lets that key in, through a forced
wrapper that exports CUDA_VISIBLE_DEVICES (agents.ssh_shells). The keys and every shell they
opened end with the lease's workload (`Connector.unbind`), however the lease ends.

A key's row (`LeaseShellKey`) is written, under the lease's lock, before the host is asked: the
end of a process lease that had a key (its process exits on its own) then keeps the GPUs until the
stop has taken the keys out and ended the shells (allocation.workloads.binding). A key added
while the lease ends is refused by the host, which looks for the end's mark under the lock its
keys file is edited under.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agents.base import AgentError
from agents.shells import LEASE_ENDED, ShellHost, ShellLogin
from agents.ssh_session import PinnedKey
from allocation.audit import audit
from allocation.choices import END_STATES, LeaseState
from allocation.models import Lease, LeaseShellKey
from allocation.selectors import as_lease_id, lease_list
from allocation.workloads.binding import bind_request
from core.db import db_now
from core.errors import Conflict, DomainError, NotFound
from inventory.discovery import source_connector

#: Keys one lease may have at once (each `gpupool ssh` adds one and takes it back at its end).
MAX_KEYS = 16


class ShellUnavailable(DomainError):
    """The lease's host could not be reached: try again."""

    status = 502
    code = "shell_unavailable"


@dataclass(frozen=True)
class ShellGrant:
    key: LeaseShellKey
    login: ShellLogin
    lease: Lease


def _locked_lease(user: Any, lease_id: Any) -> Lease:
    key = as_lease_id(lease_id)
    lease = None
    if key is not None:
        lease = (lease_list(user=user, related=False).select_for_update(of=("self",))
                 .select_related("host__source").filter(pk=key).first())
    if lease is None:
        raise NotFound("No Lease matches the given query.")
    return lease


def _shell_host(lease: Lease) -> tuple[ShellHost, dict[str, Any]]:
    """The connector and workload handle of a lease a shell may be opened on, or why not."""
    if not lease.binding_spec:
        raise Conflict("this lease has no binding; request one with {\"binding\": {\"kind\": \"session\"}} to log "
                       "in to its host", code="no_shell")
    if lease.state in END_STATES or lease.ending_since is not None:
        raise Conflict(f"the lease has ended ({lease.state})", code="lease_ended")
    handle = (lease.binding_status or {}).get("handle")
    if lease.state != LeaseState.BOUND or not isinstance(handle, dict) or lease.host is None:
        raise Conflict(f"the lease's {lease.binding_kind} has not started yet (the lease is {lease.state}); ask "
                       "again once it is bound", code="workload_not_started")
    try:
        connector = source_connector(lease.host.source)
    except Exception as exc:  # an unknown kind, unreadable secrets
        raise ShellUnavailable(f"cannot use source {lease.host.source.name}: {exc}") from None
    if not isinstance(connector, ShellHost):
        raise Conflict(f"a lease on a {lease.host.source.kind} source has no ssh login (a pod lease: `gpupool exec`)",
                       code="no_shell")
    return connector, handle


def _parsed(public_key: Any) -> PinnedKey:
    try:
        if not isinstance(public_key, str) or "\n" in public_key.strip():
            raise ValueError("one OpenSSH public key line, like 'ssh-ed25519 AAAA… comment'")
        return PinnedKey.parse(public_key)
    except ValueError as exc:
        raise DomainError(f"public_key: {exc}", details={"public_key": [str(exc)]}) from None


def lease_shell_key_add(*, user: Any, lease_id: Any, public_key: str) -> ShellGrant:
    """Authorise `public_key` on the host of a bound lease `user` may see, for the lease's life.
    Raises NotFound (not visible), 400 `invalid` (not a public key), 409 `no_shell` (no binding,
    or not an ssh source), `workload_not_started`, `lease_ended`, `too_many_shell_keys`, or 502
    `shell_unavailable` (the host did not answer: try again)."""
    pinned = _parsed(public_key)
    with transaction.atomic():
        lease = _locked_lease(user, lease_id)
        connector, handle = _shell_host(lease)
        if lease.shell_keys.filter(removed_at__isnull=True).count() >= MAX_KEYS:
            raise Conflict(f"the lease has {MAX_KEYS} keys, the most it may have; remove one first",
                           code="too_many_shell_keys")
        row = LeaseShellKey.objects.create(lease=lease, user=user, fingerprint=pinned.fingerprint,
                                           key_type=pinned.key_type, created_at=db_now())
        request = bind_request(lease)
    uuids = request.gpu_uuids if request is not None else ()
    try:
        login = connector.authorize_key(handle, key_id=row.key_id, public_key=public_key.strip(), gpu_uuids=uuids)
    except AgentError as exc:
        LeaseShellKey.objects.filter(pk=row.pk).update(removed_at=db_now())  # the row stays: see the module
        if exc.message == LEASE_ENDED:
            raise Conflict("the lease has ended", code="lease_ended") from None
        if exc.permanent:
            raise Conflict(f"cannot open a shell on this lease: {exc.message}", code="no_shell") from None
        raise ShellUnavailable(exc.message) from None
    host = lease.host.name if lease.host else ""
    audit(actor=user.username, action="lease.shell_key_added", obj=lease, lease=lease, at=row.created_at,
          message=f"{pinned.key_type} key {pinned.fingerprint} may log in to {host} for the lease's life",
          data={"key": row.pk, "fingerprint": pinned.fingerprint}).save()
    return ShellGrant(key=row, login=login, lease=lease)


def lease_shell_key_remove(*, user: Any, lease_id: Any, key: Any) -> LeaseShellKey:
    """Take back one key of a lease `user` may see (its open shells go on until the lease ends).
    Idempotent; a lease that ended lost its keys already. NotFound for an unknown key; 502
    `shell_unavailable` when the host could not be asked (the key stays until the lease ends)."""
    with transaction.atomic():
        lease = _locked_lease(user, lease_id)
        row = lease.shell_keys.filter(pk=key).first() if str(key).isdigit() else None
        if row is None:
            raise NotFound("No such key on this lease.")
        if row.removed_at is not None:
            return row
        connector: ShellHost | None = None
        handle: dict[str, Any] = {}
        with contextlib.suppress(Conflict):  # ended, or stopping: the stop takes every key out
            connector, handle = _shell_host(lease)
    if connector is not None:
        try:
            connector.revoke_key(handle, key_id=row.key_id)
        except AgentError as exc:
            if not exc.permanent:
                raise ShellUnavailable(exc.message) from None
    row.removed_at = db_now()
    row.save(update_fields=["removed_at"])
    audit(actor=user.username, action="lease.shell_key_removed", obj=lease, lease=lease, at=row.removed_at,
          message=f"{row.key_type} key {row.fingerprint} taken back",
          data={"key": row.pk, "fingerprint": row.fingerprint}).save()
    return row
