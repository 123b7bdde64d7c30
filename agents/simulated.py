"""The simulated source: a deterministic demo fleet (the embedded demo, tests and benchmarks).

It implements the whole connector interface so that the engine, binding tasks and dashboard run
end to end without any real GPU. Telemetry moves a little between passes so charts have life.

Its workloads run nothing. One lasts the binding's `duration_s`, else the source's
`workload_duration_s`, else until its lease ends; then it exits with the binding's `exit_code`
(default 0), which ends its lease as a real one would. Its log is made up, and says so: a line
naming the command, one line a second while it "runs", and a last line with the exit code.
"""

from __future__ import annotations

import shlex
import threading
import time
import zlib
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from agents.base import (
    BIND_FAILED,
    BIND_RUNNING,
    BIND_SUCCEEDED,
    BindingStatus,
    BindRequest,
    Connector,
    Discovery,
    GpuFact,
    HostFact,
    LogStream,
    last_lines,
)

DEFAULTS: dict[str, Any] = {
    "hosts": 4,
    "gpus_per_host": 8,
    "model": "NVIDIA H100 80GB HBM3",
    "memory_mb": 81559,
    "driver_version": "550.54.15",
    "cuda_version": "12.4",
}


class SimulatedConnector(Connector):
    kind = "simulated"
    workloads: ClassVar[frozenset[str]] = frozenset({"process", "pod"})
    config_keys = frozenset({*DEFAULTS, "host_prefix", "workload_duration_s"})

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> list[str]:
        errors = []
        for key in ("hosts", "gpus_per_host", "memory_mb"):
            value = config.get(key, DEFAULTS[key])
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "hosts" else 1):
                errors.append(f"'{key}' must be a positive integer, got {value!r}")
        for key in ("model", "driver_version", "cuda_version", "host_prefix"):
            if key in config and not isinstance(config[key], str | int | float):
                errors.append(f"'{key}' must be a string")
        duration = config.get("workload_duration_s")
        if duration is not None and (isinstance(duration, bool) or not isinstance(duration, int | float)
                                     or duration < 0):
            errors.append(f"'workload_duration_s' must be a number of seconds (0 or more), got {duration!r}")
        return errors

    def _opt(self, key: str) -> Any:
        return self.config.get(key, DEFAULTS.get(key))

    def host_names(self) -> list[str]:
        prefix = self.config.get("host_prefix") or f"{self.name}-node"
        return [f"{prefix}-{i}" for i in range(int(self._opt("hosts")))]

    def discover(self) -> Discovery:
        hosts = []
        tick = int(time.time() // 30)
        for host in self.host_names():
            gpus = []
            for i in range(int(self._opt("gpus_per_host"))):
                uuid = f"GPU-sim-{self.name}-{host}-{i}"
                wobble = zlib.crc32(f"{uuid}:{tick}".encode()) % 1000
                gpus.append(GpuFact(
                    uuid=uuid, index=i, model=str(self._opt("model")),
                    memory_mb=int(self._opt("memory_mb")),
                    utilization_pct=float(wobble % 100), memory_used_mb=wobble * 8,
                    temperature_c=35.0 + wobble % 40, power_w=60.0 + wobble % 300,
                ))
            hosts.append(HostFact(
                name=host, address=host, driver_version=str(self._opt("driver_version")),
                cuda_version=str(self._opt("cuda_version")), gpus=tuple(gpus),
            ))
        return Discovery(hosts=tuple(hosts))

    def bind(self, request: BindRequest) -> BindingStatus:
        spec = request.spec
        duration = spec.get("duration_s", self.config.get("workload_duration_s"))
        handle = {"lease": request.lease_id, "host": request.host_name, "started": time.time(),
                  "duration_s": duration, "exit_code": int(spec.get("exit_code") or 0),
                  "kind": str(spec.get("kind", "process")), "command": _command_text(spec)}
        return BindingStatus(state=BIND_RUNNING, handle=handle)

    def observe(self, handle: Mapping[str, Any]) -> BindingStatus:
        duration = handle.get("duration_s")
        if duration is None or time.time() - float(handle.get("started", 0)) < float(duration):
            return BindingStatus(state=BIND_RUNNING, handle=handle)
        code = int(handle.get("exit_code") or 0)
        if code == 0:
            return BindingStatus(state=BIND_SUCCEEDED, handle=handle, exit_code=0,
                                 reason="simulated workload finished")
        return BindingStatus(state=BIND_FAILED, handle=handle, exit_code=code,
                             reason=f"simulated workload exited with code {code}")

    def logs(self, handle: Mapping[str, Any], *, tail: int | None, follow: bool) -> LogStream:
        """The made-up log of the workload so far (its last `tail` lines), then, with `follow`,
        a line a second until it ends."""
        return SimulatedLog(handle, tail=tail, follow=follow)

    def unbind(self, handle: Mapping[str, Any], *, grace_s: int) -> None:
        return None


def _command_text(spec: Mapping[str, Any]) -> str:
    """What the workload would run, in words: a process's argv, a pod's first container."""
    command = spec.get("command")
    if isinstance(command, list | tuple):
        return " ".join(shlex.quote(str(word)) for word in command)
    containers = ((spec.get("pod") or {}).get("spec") or {}).get("containers") or [{}]
    first = containers[0] if isinstance(containers[0], Mapping) else {}
    words = [str(w) for w in (first.get("command") or []) + (first.get("args") or [])]
    return " ".join([f"pod image {first.get('image', '?')}:", *map(shlex.quote, words)])


class SimulatedLog(LogStream):
    """Line k of the log is written k seconds after the start: line 0 names the command, then a
    step a second, and at the end (`duration_s`) a last line with the exit code."""

    def __init__(self, handle: Mapping[str, Any], *, tail: int | None, follow: bool) -> None:
        super().__init__()
        self.handle, self.tail, self.follow = handle, tail, follow
        self.started = float(handle.get("started") or time.time())
        duration = handle.get("duration_s")
        self.duration = None if duration is None else float(duration)
        self._stop = threading.Event()

    def line(self, k: int) -> bytes:
        h = self.handle
        if k == 0:
            text = f"[simulated] {h.get('kind', 'process')} of lease {h.get('lease')} on {h.get('host')}: " \
                   f"{h.get('command') or '(no command)'}"
        elif self.duration is not None and k >= self.duration:
            text = f"[simulated] exited with code {int(h.get('exit_code') or 0)}"
        else:
            text = f"[simulated] step {k}" + (f" of {int(self.duration)}" if self.duration is not None else "")
        return (text + "\n").encode()

    def last(self) -> int | None:
        """The number of the final line, None when it never ends."""
        return None if self.duration is None else max(1, int(-(-self.duration // 1)))

    def written(self, now: float) -> int:
        """How many lines are written by `now`."""
        count = int(max(0.0, now - self.started)) + 1
        last = self.last()
        return count if last is None else min(count, last + 1)

    def chunks(self) -> Iterator[bytes]:
        count = self.written(time.time())
        lines = b"".join(self.line(k) for k in range(max(0, count - 10_000), count))
        if self.tail is not None:
            lines = last_lines(lines, self.tail)[0]
        if lines:
            yield lines
        last = self.last()
        while self.follow and (last is None or count <= last):
            if self._stop.wait(max(0.0, self.started + count - time.time())):
                return
            yield self.line(count)
            count += 1
        self.workload_ended = self.follow

    def interrupt(self) -> None:
        self._stop.set()
