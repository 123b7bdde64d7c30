"""`nvidia-smi -q -x` XML (DTD v8 to v12) → versions, GPUs, their MIG devices and processes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from typing import NamedTuple

from agents.base import HEALTH_UNHEALTHY, GpuFact, GpuProcess
from agents.nvidia_smi.values import Health, NvidiaSmiError, clean, health, is_lost_marker, to_float, to_int


class XmlReport(NamedTuple):
    driver_version: str
    cuda_version: str
    gpus: tuple[GpuFact, ...]


def _text(element: ET.Element | None, path: str) -> str | None:
    found = element.find(path) if element is not None else None
    return clean(found.text) if found is not None else None


def _xml_ecc_uncorrected(volatile: ET.Element | None) -> int | None:
    """Sum of uncorrectable volatile counters: `*_uncorrectable` (v11+) or `double_bit/total`
    (v8). None when every counter reads N/A."""
    if volatile is None:
        return None
    values = [to_int(el.text) for el in volatile.iter() if el.tag.endswith("_uncorrectable")]
    values.append(to_int(volatile.findtext("double_bit/total")))
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _xml_processes(gpu: ET.Element) -> dict[tuple[str, str], list[GpuProcess]]:
    """Processes keyed by (gpu_instance_id, compute_instance_id); ('', '') without MIG."""
    procs: dict[tuple[str, str], list[GpuProcess]] = {}
    for info in gpu.findall("processes/process_info"):
        key = (_text(info, "gpu_instance_id") or "", _text(info, "compute_instance_id") or "")
        pid, memory = to_int(info.findtext("pid")), to_int(info.findtext("used_memory"))
        procs.setdefault(key, []).append(GpuProcess(pid, memory, _text(info, "process_name") or ""))
    return procs


def parse_query_xml(text: str) -> XmlReport:
    """Versions and GPUs (with MIG devices and processes) from `nvidia-smi -q -x`.

    `index` is the GPU's position in the document (nvidia-smi lists in index order; do not
    trust `attached_gpus`). MIG devices without a `<uuid>` get the legacy CUDA name
    `MIG-<parent uuid>/<gpu instance>/<compute instance>`, which CUDA_VISIBLE_DEVICES accepts.
    Raises NvidiaSmiError for text that is not XML.
    """
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        raise NvidiaSmiError(f"nvidia-smi -q -x output is not XML: {exc}") from exc
    facts: list[GpuFact] = []
    for position, gpu in enumerate(root.findall("gpu")):
        facts.extend(_gpu_and_slices(gpu, position))
    driver = _text(root, "driver_version") or ""
    return XmlReport(driver, _text(root, "cuda_version") or "", tuple(facts))


def _gpu_and_slices(gpu: ET.Element, position: int) -> list[GpuFact]:
    """The GPU followed by its MIG devices; nothing for a GPU without a UUID."""
    uuid = _text(gpu, "uuid")
    if not uuid:
        return []
    state = health(_xml_ecc_uncorrected(gpu.find("ecc_errors/volatile")), _is_lost(gpu))
    procs = _xml_processes(gpu)
    parent = GpuFact(
        uuid=uuid,
        index=position,
        model=_text(gpu, "product_name") or "",
        memory_mb=to_int(_text(gpu, "fb_memory_usage/total")),
        memory_used_mb=to_int(_text(gpu, "fb_memory_usage/used")),
        utilization_pct=to_float(_text(gpu, "utilization/gpu_util")),
        temperature_c=to_float(_text(gpu, "temperature/gpu_temp")),
        power_w=_power(gpu),
        processes=tuple(procs.pop(("", ""), [])),
        health=state.state,
        health_reason=state.reason,
    )
    slices = [_mig_slice(mig, parent, procs) for mig in gpu.findall("mig_devices/mig_device")]
    # Processes whose MIG instance we could not match still belong on the physical GPU.
    leftover = tuple(p for ps in procs.values() for p in ps)
    return [replace(parent, processes=parent.processes + leftover), *slices]


def _mig_slice(mig: ET.Element, parent: GpuFact, procs: dict[tuple[str, str], list[GpuProcess]]) -> GpuFact:
    """One MIG device; it takes its processes out of `procs`, and its parent's ill health."""
    gi, ci = _text(mig, "gpu_instance_id") or "", _text(mig, "compute_instance_id") or ""
    state = health(_xml_ecc_uncorrected(mig.find("ecc_error_count/volatile_count")), False)
    if parent.health == HEALTH_UNHEALTHY:
        state = Health(parent.health, parent.health_reason)
    return GpuFact(
        uuid=_text(mig, "uuid") or f"MIG-{parent.uuid}/{gi}/{ci}",
        index=to_int(mig.findtext("index")) or 0,
        model=parent.model,
        memory_mb=to_int(_text(mig, "fb_memory_usage/total")),
        memory_used_mb=to_int(_text(mig, "fb_memory_usage/used")),
        parent_uuid=parent.uuid,
        processes=tuple(procs.pop((gi, ci), [])),
        health=state.state,
        health_reason=state.reason,
    )


def _power(gpu: ET.Element) -> float | None:
    """The first power reading there is: element names moved between DTD versions."""
    for readings in ("gpu_power_readings", "power_readings"):
        for name in ("power_draw", "instant_power_draw", "average_power_draw"):
            power = to_float(_text(gpu, f"{readings}/{name}"))
            if power is not None:
                return power
    return None


def _is_lost(gpu: ET.Element) -> bool:
    if (_text(gpu, "gpu_reset_status/reset_required") or "").lower() == "yes":
        return True
    return any(is_lost_marker(el.text) for el in gpu.iter())
