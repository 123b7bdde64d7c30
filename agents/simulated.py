"""The simulated source: a deterministic demo fleet (the embedded demo, tests and benchmarks).

It implements the whole connector interface so that the engine, binding tasks and dashboard run
end to end without any real GPU. Telemetry moves a little between passes so charts have life.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Mapping
from typing import Any, ClassVar

from agents.base import (
    BIND_RUNNING,
    BIND_SUCCEEDED,
    BindingStatus,
    BindRequest,
    Connector,
    Discovery,
    GpuFact,
    HostFact,
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
    config_keys = frozenset({*DEFAULTS, "host_prefix"})

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
        duration = request.spec.get("duration_s")
        handle = {"lease": request.lease_id, "host": request.host_name, "started": time.time(),
                  "duration_s": duration}
        return BindingStatus(state=BIND_RUNNING, handle=handle)

    def observe(self, handle: Mapping[str, Any]) -> BindingStatus:
        duration = handle.get("duration_s")
        if duration is not None and time.time() - float(handle.get("started", 0)) >= float(duration):
            return BindingStatus(state=BIND_SUCCEEDED, handle=handle, exit_code=0,
                                 reason="simulated workload finished")
        return BindingStatus(state=BIND_RUNNING, handle=handle)

    def unbind(self, handle: Mapping[str, Any], *, grace_s: int) -> None:
        return None
