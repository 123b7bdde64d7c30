"""Plain-text nvidia-smi output: `-L` (GPUs and MIG devices), the version banner, lost GPUs."""

from __future__ import annotations

import re

from agents.base import GpuFact
from agents.nvidia_smi.values import LostGpu, normalize_bus_id

# "Unable to determine (or detect) the device handle for GPU0000:3B:00.0: Unknown Error".
_HANDLE_ERROR = re.compile(
    r"Unable to (?:determine|detect) the device handle for GPU\s*((?:[0-9A-F]+:)+[0-9A-F]+\.[0-9A-F]+)", re.IGNORECASE
)
_LIST_GPU = re.compile(r"^GPU\s+(\d+):\s*(.*?)\s*\(UUID:\s*([^)\s]+)\s*\)")
_LIST_MIG = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s*\(UUID:\s*([^)\s]+)\s*\)")


def parse_list(text: str) -> tuple[GpuFact, ...]:
    """GPUs and MIG devices from `nvidia-smi -L`, each MIG device right after its parent.

    A MIG device's `index` is its device number within the parent, its `model` the parent's,
    and `memory_mb` None: `-L` does not give it, and a guess from the profile name would
    over-state it (a `1g.10gb` slice has 9856 MiB on H100).
    """
    facts: list[GpuFact] = []
    parent: GpuFact | None = None
    for line in text.splitlines():
        if gpu := _LIST_GPU.match(line):
            parent = GpuFact(uuid=gpu.group(3), index=int(gpu.group(1)), model=gpu.group(2))
            facts.append(parent)
        elif (mig := _LIST_MIG.match(line)) and parent is not None:
            profile, number, uuid = mig.group(1), int(mig.group(2)), mig.group(3)
            facts.append(GpuFact(uuid, number, parent.model, mig_profile=profile,
                                 parent_uuid=parent.uuid))  # fmt: skip
    return tuple(facts)


def find_lost_gpus(text: str) -> list[LostGpu]:
    """GPUs nvidia-smi could not open ("Unable to determine the device handle for GPU ...")."""
    found = []
    for line in text.splitlines():
        if match := _HANDLE_ERROR.search(line):
            found.append(LostGpu(normalize_bus_id(match.group(1)), line.strip()))
    return found


def parse_versions(text: str) -> tuple[str, str]:
    """(driver, CUDA) versions from `nvidia-smi -q` text or the plain banner; '' when absent."""
    driver = re.search(r"Driver Version\s*:\s*([0-9][\w.]*)", text)
    cuda = re.search(r"CUDA Version\s*:\s*([0-9][\w.]*)", text)
    return (driver.group(1) if driver else "", cuda.group(1) if cuda else "")
