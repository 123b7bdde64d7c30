"""The SSH connector's shells (`agents.shells.ShellHost`): session bindings, users' keys for a
lease, and their end with the lease's workload. The scripts are `agents.ssh_shells`; this is the
part of `agents.ssh.SshConnector` that runs them (a mixin, so that ssh.py stays about discovery
and processes).

Config keys of an ssh source for shells:

    authorized_keys: ~/.ssh/authorized_keys   # the file of `user`'s keys that gpupool edits
    shell_forwarding: true                    # keys may forward ports (`ssh -L 8888:…` to a notebook)

A `session` binding starts nothing: it makes the lease's directory on its host, where the shells'
wrapper and records live, and the lease is bound. Only `unbind` ends it (release, expiry, idle
reclaim, preemption), by taking its keys out and stopping its shells.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agents import ssh_scripts, ssh_shells, time_slicing
from agents.base import BIND_RUNNING, AgentError, BindingStatus, BindRequest
from agents.shells import LEASE_ENDED, ShellHost, ShellLogin

if TYPE_CHECKING:
    from agents.ssh_session import HostSpec, SshSession

SESSION = "session"
SHELL_DEFAULTS: dict[str, Any] = {"authorized_keys": "~/.ssh/authorized_keys", "shell_forwarding": True}


def shell_config_errors(config: Mapping[str, Any]) -> list[str]:
    errors = []
    keys = config.get("authorized_keys", SHELL_DEFAULTS["authorized_keys"])
    if not isinstance(keys, str) or not keys or "\n" in keys:
        errors.append("authorized_keys must be a file path")
    if not isinstance(config.get("shell_forwarding", True), bool):
        errors.append("shell_forwarding must be true or false")
    return errors


class SshShellAccess(ShellHost):
    """Shells for `SshConnector` (it provides the attributes declared below)."""

    if TYPE_CHECKING:
        name: str
        config: Mapping[str, Any]
        request_timeout_s: float

        def _setting(self, key: str) -> Any: ...
        def _session(self, host: HostSpec) -> SshSession: ...
        def _host_for(self, name: str, address: str, port: int | None = None) -> HostSpec: ...

    def _shell_setting(self, key: str) -> Any:
        return self.config.get(key, SHELL_DEFAULTS[key])

    def _bind_session(self, request: BindRequest) -> BindingStatus:
        """Make the lease's directory on its host; the lease is then bound, with nothing running."""
        host = self._host_for(request.host_name, request.host_address)
        try:
            script = ssh_shells.session_bind_script(str(self._setting("state_dir")), request.binding_id)
        except ValueError as exc:
            raise AgentError(str(exc), permanent=True) from None
        with self._session(host) as session:
            marks = ssh_scripts.read_marks(session.run(script, timeout=self.request_timeout_s).stdout)
        if "cancelled" in marks:
            raise AgentError(f"the lease's binding on {host.where} was stopped before it started", permanent=True)
        if "dir" not in marks:
            raise AgentError(f"cannot start the lease's session on {host.where}: {marks.get('error', 'no answer')}")
        handle = {"kind": SESSION, "host": host.name, "address": host.address, "port": host.port,
                  "lease_id": request.lease_id, "binding_id": request.binding_id, "dir": marks["dir"]}
        return BindingStatus(state=BIND_RUNNING, handle=handle)

    def _handle_host(self, handle: Mapping[str, Any]) -> tuple[HostSpec, str, str]:
        """(host, lease dir, binding id) of a bound process's or session's handle."""
        try:
            port = int(handle["port"]) if "port" in handle else None
            host = self._host_for(str(handle.get("host", "")), str(handle["address"]), port)
            return host, str(handle["dir"]), ssh_scripts.check_lease_id(str(handle["binding_id"]))
        except (KeyError, ValueError, TypeError):
            raise AgentError(f"not a bound ssh lease: {dict(handle)!r}", permanent=True) from None

    def end_prelude(self, handle: Mapping[str, Any]) -> str:
        """The part of the lease's stop script that ends its shells ("" for a handle without a
        lease directory: a bind known only by its name never had a key)."""
        if "dir" not in handle or "binding_id" not in handle:
            return ""
        _, directory, binding_id = self._handle_host(handle)
        return ssh_shells.end_prelude(lease_dir=directory, binding_id=binding_id,
                                      authorized_keys=str(self._shell_setting("authorized_keys")))

    def authorize_key(self, handle: Mapping[str, Any], *, key_id: str, public_key: str,
                      gpu_uuids: Sequence[str]) -> ShellLogin:
        host, directory, binding_id = self._handle_host(handle)
        try:
            line = ssh_shells.key_line(public_key, lease_dir=directory, binding_id=binding_id, key_id=key_id,
                                       port_forwarding=bool(self._shell_setting("shell_forwarding")))
            wrapper = ssh_shells.wrapper_script(directory, str(handle.get("lease_id", binding_id)),
                                                time_slicing.physical_uuids(tuple(gpu_uuids)))
        except ValueError as exc:
            raise AgentError(str(exc), permanent=True) from None
        script = ssh_shells.authorize_script(lease_dir=directory, line=line, wrapper=wrapper,
                                             authorized_keys=str(self._shell_setting("authorized_keys")))
        with self._session(host) as session:
            marks = ssh_scripts.read_marks(session.run(script, timeout=self.request_timeout_s + 10).stdout)
        if "revoked" in marks:
            raise AgentError(LEASE_ENDED, permanent=True)
        if "authorized" not in marks:
            raise AgentError(f"cannot authorise the key on {host.where}: {marks.get('error', 'no answer')}")
        return ShellLogin(address=host.address, port=host.port, user=str(self.config["user"]),
                          host_key=host.host_key)

    def revoke_key(self, handle: Mapping[str, Any], *, key_id: str) -> None:
        host, _, binding_id = self._handle_host(handle)
        try:
            script = ssh_shells.revoke_script(authorized_keys=str(self._shell_setting("authorized_keys")),
                                              binding_id=binding_id, key_id=key_id)
        except ValueError as exc:
            raise AgentError(str(exc), permanent=True) from None
        with self._session(host) as session:
            marks = ssh_scripts.read_marks(session.run(script, timeout=self.request_timeout_s + 10).stdout)
        if "revoked" not in marks:
            raise AgentError(f"cannot take the key back on {host.where}: {marks.get('error', 'no answer')}")
