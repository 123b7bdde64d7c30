"""A command in a pod lease's container (`/api/v1/leases/{id}/exec/`, `gpupool exec`): which
workload, through which connector, and the audit of who ran what.

The ASGI front serves it as a websocket (allocation/watch/exec.py), the connector's blocking reads
on the log streams' thread pool and under their caps (allocation.workloads.logs.SLOTS). A VM
lease has no exec: its users log in (allocation.services.shells, `gpupool ssh`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents.base import AgentError
from agents.shells import ExecSession, PodExec
from allocation.audit import audit
from allocation.choices import END_STATES, LeaseState
from allocation.selectors import as_lease_id, lease_list
from core.errors import Conflict, DomainError, NotFound
from inventory.discovery import source_connector


class ExecUnavailable(DomainError):
    """The workload's API server could not be reached: try again."""

    status = 502
    code = "exec_unavailable"


@dataclass(frozen=True)
class WorkloadExec:
    lease_id: str
    user_id: int
    connector: PodExec
    handle: Mapping[str, Any]
    command: tuple[str, ...]
    tty: bool
    stdin: bool

    def open(self) -> ExecSession:
        """Start the command (seconds at most: the connector's timeouts). Raises 409
        `workload_not_running` (the pod is gone or not running) or 502 `exec_unavailable`."""
        try:
            return self.connector.exec(self.handle, self.command, tty=self.tty, stdin=self.stdin)
        except AgentError as exc:
            if exc.permanent:
                raise Conflict(exc.message, code="workload_not_running") from None
            raise ExecUnavailable(exc.message) from None


def exec_target(*, user: Any, lease_id: Any, command: list[str], tty: bool, stdin: bool) -> WorkloadExec:
    """The workload of a lease `user` may see, for `command`. NotFound for a lease they may not
    see; 409 `no_workload` (no binding), `no_exec` (not a pod: `gpupool ssh`), `lease_ended`,
    `workload_not_started`."""
    key = as_lease_id(lease_id)
    lease = lease_list(user=user, related=False).select_related("host__source").filter(pk=key).first() \
        if key is not None else None
    if lease is None:
        raise NotFound("No Lease matches the given query.")
    if not lease.binding_spec:
        raise Conflict("this lease has no workload: it was requested without a binding", code="no_workload")
    if lease.state in END_STATES:
        raise Conflict(f"the lease has ended ({lease.state})", code="lease_ended")
    handle = (lease.binding_status or {}).get("handle")
    if lease.state != LeaseState.BOUND or not isinstance(handle, Mapping) or lease.host is None:
        raise Conflict(f"the lease's workload has not started yet (the lease is {lease.state}); ask again once "
                       "it is bound", code="workload_not_started")
    try:
        connector = source_connector(lease.host.source)
    except Exception as exc:  # an unknown kind, unreadable secrets
        raise ExecUnavailable(f"cannot use source {lease.host.source.name}: {exc}") from None
    if not isinstance(connector, PodExec):
        raise Conflict(f"a {lease.binding_kind} lease on a {lease.host.source.kind} source has no exec: log in "
                       "with `gpupool ssh` (POST leases/{id}/ssh-keys/)", code="no_exec")
    return WorkloadExec(lease_id=str(lease.pk), user_id=int(user.pk), connector=connector, handle=dict(handle),
                        command=tuple(command), tty=tty, stdin=stdin)


def exec_audit(target: WorkloadExec, *, actor: str) -> None:
    """Who ran what in the lease's container: one audit event per exec, before it starts."""
    from allocation.models import Lease

    lease = Lease.objects.get(pk=target.lease_id)
    audit(actor=actor, action="lease.exec", obj=lease, lease=lease,
          message=f"exec{' (tty)' if target.tty else ''}: {' '.join(target.command)[:400]}",
          data={"command": list(target.command), "tty": target.tty, "stdin": target.stdin}).save()
