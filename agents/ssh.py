"""VMs and bare-metal machines reached over SSH (paramiko), with nvidia-smi on each host.

Config (a `sources` entry of kind `ssh`, secrets already decrypted by the caller)::

    user: gpu
    key_file: /etc/gpupool/id_ed25519      # or private_key: "-----BEGIN OPENSSH PRIVATE KEY..."
    nvidia_smi: nvidia-smi                 # optional; may be several words ("sudo -n nvidia-smi")
    hosts:
      - {address: 10.0.0.5, port: 22, host_key: "ssh-ed25519 AAAA...", name: gpu-a}
      - {address: 10.0.0.6, host_key: "...", time_slicing: 4}   # 4 replicas per GPU
    connect_timeout: 10                    # optional, seconds
    command_timeout: 30                    # optional, seconds
    max_parallel: 16                       # optional: hosts read at once
    state_dir: ~/.gpupool                  # optional: where bound processes keep their files
    authorized_keys: ~/.ssh/authorized_keys  # optional: where users' keys for a lease's shell go
    shell_forwarding: true                 # optional: whether those keys may forward ports
    backoff: {initial_s: 30, max_s: 900}   # optional: how a host that keeps failing is probed less often

`agents.ssh_config` checks an entry (the connector's `validate_config`, and each host entry at
discovery).

Discovery costs one SSH connection and one remote command per host, all hosts in parallel up
to `max_parallel`. A host that cannot be read (refused, timed out, wrong host key, bad
credentials, nvidia-smi missing) comes back offline with the reason in `HostFact.error`; the
other hosts are unaffected; after failures in a row it is probed less often (`agents.host_backoff`:
30 s doubling to 15 min, jittered), so a dead host stops costing every round a connect timeout.
Host keys are pinned: a host is only ever trusted by its configured `host_key`, never on first use.

Process bindings run on the lease's host in their own session; see `agents.ssh_scripts` for the
files kept per lease and why the session id makes the whole process tree reachable. Users may log
in to a bound lease (process or `session`) with a key of their own for the lease's life
(`agents.ssh_access`, `agents.ssh_shells`).

A host's `time_slicing: N` (default 1) reports N replicas of each GPU (`agents.time_slicing`):
up to N leases' processes then share one device in turns, as pods do under Kubernetes'
time-slicing; a process is given the physical GPUs behind its replicas.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from agents import ssh_logs, ssh_scripts, time_slicing
from agents.base import (
    BIND_FAILED,
    BIND_GONE,
    BIND_RUNNING,
    BIND_SUCCEEDED,
    GPU_ERRORS_LABEL,
    HOST_OFFLINE,
    HOST_READY,
    AgentError,
    BindingStatus,
    BindRequest,
    Connector,
    Discovery,
    HostFact,
    LogStream,
)
from agents.host_backoff import HostBackoff
from agents.nvidia_smi.report import read_host_report
from agents.nvidia_smi.values import NvidiaSmiError
from agents.ssh_access import SESSION, SshShellAccess
from agents.ssh_config import (
    CONFIG_KEYS,
    DEFAULTS,
    config_errors,
    host_errors,
    host_name,
    host_spec,
    source_errors,
)
from agents.ssh_session import HostSpec, SshSession, load_private_key


class SshConnector(SshShellAccess, Connector):
    """Hosts listed in the config, read and driven over SSH with pinned host keys.

    Timeouts and the retry budget are the base Connector's: `connect_timeout_s` bounds reaching a
    host (TCP, handshake, authentication), `request_timeout_s` (config key `command_timeout`) one
    remote command. Only a connection the host dropped during the handshake is retried (sshd's
    MaxStartups does that under a burst of parallel logins); a refused or silent host is reported
    at once, and commands are never retried here (bind retries belong to the lease's task).
    """

    kind = "ssh"
    workloads: ClassVar[frozenset[str]] = frozenset({"process", SESSION})
    config_keys: ClassVar[frozenset[str]] = CONFIG_KEYS
    secret_fields = ("private_key",)
    request_timeout_s = 30.0  # nvidia-smi on a host with many GPUs takes seconds
    request_timeout_key = "command_timeout"

    def __init__(self, name: str, config: Mapping[str, Any]) -> None:
        super().__init__(name, config)
        self._pkey: Any = None
        self._pkey_lock = threading.Lock()

    # --- configuration --------------------------------------------------------------------------

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> list[str]:
        """Human sentences for everything wrong with an entry (`agents.ssh_config`); empty when
        it is usable."""
        return config_errors(config, cls.config_keys)

    def _setting(self, key: str) -> Any:
        return self.config.get(key, DEFAULTS[key])

    def hosts(self) -> list[HostSpec]:
        """The usable configured hosts (name defaults to the address); bad entries are left
        out here and reported by `validate_config` and `discover`."""
        return [host_spec(entry, position) for position, entry in enumerate(self.config.get("hosts") or [])
                if not host_errors(entry)]

    def _private_key(self) -> Any:
        with self._pkey_lock:  # parsed once, shared by all threads of a discovery pass
            if self._pkey is None:
                self._pkey = load_private_key(
                    key_file=self.config.get("key_file"), private_key=self.config.get("private_key")
                )
            return self._pkey

    def _session(self, host: HostSpec) -> SshSession:
        """An open session to `host`, retried within the budget when the host drops the handshake."""
        user, pkey = str(self.config["user"]), self._private_key()

        def attempt(timeout: float) -> SshSession:
            session = SshSession(host, user=user, pkey=pkey, connect_timeout=timeout)
            session.open()
            return session

        return self.retrying("", attempt, timeout=self.connect_timeout_s)

    # --- discovery ------------------------------------------------------------------------------

    def host_backoff(self) -> HostBackoff:
        """Each host is its own connection: one that keeps failing is left out of rounds."""
        return HostBackoff.from_config(self.config.get("backoff"))

    def discover(self) -> Discovery:
        """Read every host; per-host failures (a bad entry included) land on that HostFact,
        never raise. A problem that stops every host (no user, unreadable key) is
        `Discovery.error`."""
        return self.discover_except(frozenset())

    def discover_except(self, skip: frozenset[str]) -> Discovery:
        """`discover`, leaving out (unprobed, unreported) the hosts whose names are in `skip`."""
        errors = source_errors(self.config, self.config_keys)
        entries = self.config.get("hosts")
        if not isinstance(entries, list):
            errors, entries = [*errors, "hosts must be a list"], []
        if errors:
            return Discovery(error=f"source {self.name!r} is misconfigured: " + "; ".join(errors))
        try:
            self._private_key()
        except AgentError as exc:
            return Discovery(error=exc.message)
        script = ssh_scripts.discover_script(str(self._setting("nvidia_smi")))

        def discover_entry(item: tuple[int, Any]) -> HostFact:
            position, entry = item
            problems = host_errors(entry)
            if problems:
                address = str(entry.get("address", "")) if isinstance(entry, Mapping) else ""
                return HostFact(name=host_name(entry, position), address=address,
                                state=HOST_OFFLINE, error="; ".join(problems))  # fmt: skip
            spec = host_spec(entry, position)
            fact = self._discover_host(spec, script, int(entry.get("time_slicing", 1)))
            # The host's own labels (`labels:` in the config), for selectors and topology.
            return dataclasses.replace(fact, labels={**entry.get("labels", {}), **fact.labels})

        probed = [(p, e) for p, e in enumerate(entries) if host_name(e, p) not in skip]
        workers = max(1, min(int(self._setting("max_parallel")), len(probed)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ssh-discover") as pool:
            facts = list(pool.map(discover_entry, probed))
        return Discovery(hosts=tuple(facts))

    def _discover_host(self, host: HostSpec, script: str, replicas: int) -> HostFact:
        try:
            with self._session(host) as session:
                result = session.run(script, timeout=self.request_timeout_s)
            report = read_host_report(result.stdout)
        except AgentError as exc:
            return HostFact(name=host.name, address=host.address, state=HOST_OFFLINE,
                            error=exc.message)  # fmt: skip
        except NvidiaSmiError as exc:
            return HostFact(name=host.name, address=host.address, state=HOST_OFFLINE,
                            error=f"{host.where}: {exc}")  # fmt: skip
        except Exception as exc:  # one odd host must never stop the pass
            return HostFact(name=host.name, address=host.address, state=HOST_OFFLINE,
                            error=f"{host.where}: unexpected error: {exc!r}")  # fmt: skip
        labels = {GPU_ERRORS_LABEL: "; ".join(report.problems)} if report.problems else {}
        return HostFact(
            name=host.name,
            address=host.address,
            state=HOST_READY,
            driver_version=report.driver_version,
            cuda_version=report.cuda_version,
            gpus=time_slicing.replicate(report.gpus, replicas),
            labels=labels,
        )

    # --- process binding ------------------------------------------------------------------------

    def _host_for(self, name: str, address: str, port: int | None = None) -> HostSpec:
        """The configured host by name (and address, when given), else by address (and port)."""
        hosts = self.hosts()
        by_name = [h for h in hosts if h.name == name and (not address or h.address == address)]
        by_address = [h for h in hosts if h.address == address and (port is None or h.port == port)]
        found = by_name or by_address
        if found:
            return found[0]
        raise AgentError(f"host {name or address!r} is not in source {self.name!r}", permanent=True)

    def bind(self, request: BindRequest) -> BindingStatus:
        """Start `spec.command` on the lease's host, detached in its own session, with
        CUDA_VISIBLE_DEVICES = the lease's GPU UUIDs (time-sliced replicas: their physical
        GPUs', each once). Idempotent per lease id: a retry finds
        the first run (or its exit status) and never starts a second copy. Bad specs raise a
        permanent AgentError; unreachable hosts a transient one."""
        spec = request.spec
        if spec.get("kind") == SESSION:
            return self._bind_session(request)
        if spec.get("kind") != "process":
            raise AgentError("ssh sources bind only process and session workloads", permanent=True)
        env = spec.get("env") or {}
        if not isinstance(env, Mapping):
            raise AgentError("binding env must be a mapping of names to strings", permanent=True)
        try:
            command = spec.get("command")
            if not isinstance(command, list | tuple):  # a string would run letter by letter
                raise ValueError("binding command must be a non-empty list of strings")
            devices = time_slicing.physical_uuids(request.gpu_uuids)
            wrapper = ssh_scripts.wrapper_script(list(command), env, devices)
            script = ssh_scripts.bind_script(str(self._setting("state_dir")), request.binding_id, wrapper)
        except (ValueError, TypeError) as exc:
            raise AgentError(str(exc), permanent=True) from None
        host = self._host_for(request.host_name, request.host_address)
        timeout = self.request_timeout_s + 10  # the script waits up to 10 s
        with self._session(host) as session:
            marks = ssh_scripts.read_marks(session.run(script, timeout=timeout).stdout)
        if "cancelled" in marks:
            raise AgentError(f"the lease's binding on {host.where} was stopped before it started",
                             permanent=True)
        if "error" in marks:
            raise AgentError(f"cannot start lease on {host.where}: {marks['error']}")
        if "started" not in marks:
            raise AgentError(f"the lease's process on {host.where} did not start within 10 s")
        pid, _, start_time = marks["started"].partition(" ")
        directory = marks["dir"]
        handle = {
            "kind": "process",
            "host": host.name,
            "address": host.address,
            "port": host.port,
            "lease_id": request.lease_id,
            "binding_id": request.binding_id,
            "dir": directory,
            "pid": int(pid),
            "start_time": start_time,
            "log": f"{directory}/output.log",
        }
        if "exit" in marks:
            return self._ended(handle, marks["exit"])
        return BindingStatus(state=BIND_RUNNING, handle=handle)

    def bind_handle(self, request: BindRequest) -> Mapping[str, Any] | None:
        """The binding by its name (host and lease directory): `unbind` then marks it cancelled
        and stops its session if the wrapper had started. None for a spec this source never
        starts (nothing can have been left behind)."""
        kind = request.spec.get("kind")
        if kind not in ("process", SESSION):
            return None
        try:
            host = self._host_for(request.host_name, request.host_address)
            ssh_scripts.check_lease_id(request.binding_id)
        except (AgentError, ValueError):
            return None
        return {"kind": kind, "host": host.name, "address": host.address, "port": host.port,
                "lease_id": request.lease_id, "binding_id": request.binding_id}

    def _read_handle(self, handle: Mapping[str, Any]) -> tuple[HostSpec, str, int, str]:
        """(host, lease dir, pid, start time) of a handle made by `bind`."""
        try:
            port = int(handle["port"]) if "port" in handle else None
            host = self._host_for(str(handle.get("host", "")), str(handle["address"]), port)
            return host, str(handle["dir"]), int(handle["pid"]), str(handle["start_time"])
        except (KeyError, ValueError, TypeError):
            message = f"not an ssh binding handle: {dict(handle)!r}"
            raise AgentError(message, permanent=True) from None

    @staticmethod
    def _ended(handle: Mapping[str, Any], raw_code: str) -> BindingStatus:
        try:
            code = int(raw_code)
        except ValueError:
            return BindingStatus(state=BIND_FAILED, handle=handle,
                                 reason=f"unreadable exit status {raw_code!r}")  # fmt: skip
        if code == 0:
            return BindingStatus(state=BIND_SUCCEEDED, handle=handle, exit_code=0,
                                 reason="process exited with code 0")  # fmt: skip
        return BindingStatus(state=BIND_FAILED, handle=handle, exit_code=code,
                             reason=f"process {ssh_scripts.exit_reason(code)}")  # fmt: skip

    def observe(self, handle: Mapping[str, Any]) -> BindingStatus:
        """running (same pid and start time alive), succeeded (exit 0), failed (non-zero
        exit, the code in `exit_code` and `reason`), or gone (neither process nor exit file).
        Raises a transient AgentError when the host cannot be asked. A session runs until its
        lease ends: it is not asked for."""
        if handle.get("kind") == SESSION:
            return BindingStatus(state=BIND_RUNNING, handle=handle)
        host, directory, pid, start_time = self._read_handle(handle)
        script = ssh_scripts.observe_script(directory, pid, start_time)
        with self._session(host) as session:
            result = session.run(script, timeout=self.request_timeout_s)
        marks = ssh_scripts.read_marks(result.stdout)
        if "exit" in marks:
            return self._ended(handle, marks["exit"])
        if "running" in marks:
            return BindingStatus(state=BIND_RUNNING, handle=handle)
        if "gone" in marks:
            where = "its lease directory is missing" if "nodir" in marks else "no exit status"
            return BindingStatus(state=BIND_GONE, handle=handle,
                                 reason=f"process {pid} vanished ({where})")  # fmt: skip
        raise AgentError(f"could not read the lease's status on {host.where}: {result.stderr}")

    def logs(self, handle: Mapping[str, Any], *, tail: int | None, follow: bool) -> LogStream:
        """The lease's `output.log` (agents.ssh_logs): its last `tail` lines, then, with `follow`,
        what the process writes until it has exited, over one SSH session kept for the stream."""
        if handle.get("kind") == SESSION:
            raise AgentError("a session binding runs no workload: it has no log", permanent=True)
        host, directory, pid, start_time = self._read_handle(handle)
        return ssh_logs.open_log(self._session(host), directory, pid, start_time, tail=tail, follow=follow,
                                 timeout=self.request_timeout_s)

    def unbind(self, handle: Mapping[str, Any], *, grace_s: int) -> None:
        """TERM every process of the lease's session, KILL what is left after `grace_s`.
        Its users' keys go first and their shells with the workload (`agents.ssh_access`).
        Idempotent: nothing left to stop is success. Raises AgentError if the host cannot be
        reached or processes survive KILL."""
        if handle.get("kind") == SESSION and "dir" in handle:  # no workload: only its shells
            host = self._handle_host(handle)[0]
            script = ssh_scripts.unbind_script(-1, "", grace_s, prelude=self.end_prelude(handle))
        elif "pid" not in handle and handle.get("binding_id"):  # from `bind_handle`: by name
            port = int(handle["port"]) if "port" in handle else None
            host = self._host_for(str(handle.get("host", "")), str(handle.get("address", "")), port)
            script = ssh_scripts.cancel_script(str(self._setting("state_dir")), str(handle["binding_id"]), grace_s)
        else:
            host, _, pid, start_time = self._read_handle(handle)
            script = ssh_scripts.unbind_script(pid, start_time, grace_s, prelude=self.end_prelude(handle))
        # The script waits up to the grace, then up to 5 s of KILL rounds.
        timeout = self.request_timeout_s + grace_s + 10
        with self._session(host) as session:
            marks = ssh_scripts.read_marks(session.run(script, timeout=timeout).stdout)
        if "error" in marks:
            raise AgentError(f"cannot stop the lease's binding on {host.where}: {marks['error']}")
        if "survivors" in marks:
            raise AgentError(f"processes {marks['survivors']} on {host.where} survived SIGKILL")
        if "stopped" not in marks:
            raise AgentError(f"could not confirm the lease's processes stopped on {host.where}")

