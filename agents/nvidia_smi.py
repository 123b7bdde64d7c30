"""Pure parsers for `nvidia-smi` output: text in, `GpuFact`s out. No I/O, no subprocess.

Formats (tried on the real captures in tests/agents/test_nvidia_smi.py): `--query-gpu` CSV with
or without header and units (a header maps columns by field name in any order, otherwise the
given field list does); `-L` with MIG devices; `--query-compute-apps` CSV; `-q -x` XML (DTD v8
to v12); and the sectioned report of the SSH agent's remote script (`read_host_report`).

Every value nvidia-smi cannot give (`[N/A]`, `N/A`, `[Not Supported]`, `[Unknown Error]`,
`[Requested functionality has been deprecated]`, empty) becomes None; parsers never raise on odd
values. Only `read_host_report` and `parse_query_xml` raise (`NvidiaSmiError`), when a host's
output is unusable as a whole.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import NamedTuple

from agents.base import HEALTH_UNHEALTHY, GpuFact, GpuProcess

#: Field order the SSH agent asks for with `--format=csv,noheader,nounits`. All are accepted by
#: nvidia-smi since the 300-series drivers (they appear in the 212-field H100 capture as well).
QUERY_GPU_FIELDS: tuple[str, ...] = (
    "index", "uuid", "name", "memory.total", "memory.used", "utilization.gpu", "temperature.gpu",
    "power.draw", "pci.bus_id", "driver_version", "ecc.errors.uncorrected.volatile.total",
)  # fmt: skip

#: Field order for `--query-compute-apps`. `process_name` is last on purpose: a process name may
#: contain commas, and the last column takes whatever is left of the line.
QUERY_COMPUTE_APPS_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "used_gpu_memory", "process_name")

# Section names of the SSH agent's remote report; the script and this parser must agree.
REPORT_MARK = "@@gpupool"
SECTION_VERSIONS = "versions"  # `nvidia-smi -q -d COMPUTE`: header has driver and CUDA versions
SECTION_QUERY_GPU = "query-gpu"
SECTION_LIST = "list"
SECTION_COMPUTE_APPS = "compute-apps"

_ALIASES = {"used_memory": "used_gpu_memory", "gpu_name": "name", "name": "name"}
_KNOWN_FIELDS = frozenset(QUERY_GPU_FIELDS + QUERY_COMPUTE_APPS_FIELDS) | frozenset(_ALIASES)
_HEADER_CELL = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(\s*\[[^\]]*\])?$")
_NUMBER = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*[A-Za-z%/]*$")
# Wording seen in the field: "GPU is lost. Reboot the system...", "[GPU requires reset]", and
# "Unable to determine (or detect) the device handle for GPU0000:3B:00.0: Unknown Error".
_LOST_WORDS = ("gpu is lost", "gpu requires reset", "fallen off the bus")
_HANDLE_ERROR = re.compile(
    r"Unable to (?:determine|detect) the device handle for GPU\s*((?:[0-9A-F]+:)+[0-9A-F]+\.[0-9A-F]+)", re.IGNORECASE
)
_LIST_GPU = re.compile(r"^GPU\s+(\d+):\s*(.*?)\s*\(UUID:\s*([^)\s]+)\s*\)")
_LIST_MIG = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s*\(UUID:\s*([^)\s]+)\s*\)")


class NvidiaSmiError(Exception):
    """A host's nvidia-smi output is unusable as a whole (command missing, driver not loaded)."""


class LostGpu(NamedTuple):
    """A GPU nvidia-smi named by PCI bus id but could not read (fell off the bus, needs reset)."""

    bus_id: str
    message: str


class XmlReport(NamedTuple):
    driver_version: str
    cuda_version: str
    gpus: tuple[GpuFact, ...]


class HostReport(NamedTuple):
    """What one host's report says. `problems` are sentences about GPUs that could not be tied
    to a UUID (a lost GPU that no longer answers at all); inventory cannot list those."""

    driver_version: str
    cuda_version: str
    gpus: tuple[GpuFact, ...]
    problems: tuple[str, ...]


# --- values -------------------------------------------------------------------------------------


def clean(value: str | None) -> str | None:
    """Strip a raw value; None for anything nvidia-smi uses to mean "no value"."""
    if value is None:
        return None
    value = value.strip()
    if not value or value.upper() == "N/A" or (value.startswith("[") and value.endswith("]")):
        return None
    return value


def to_float(value: str | None) -> float | None:
    """`433.78 W` -> 433.78, `38 %` -> 38.0; None for missing or non-numeric values."""
    value = clean(value)
    match = _NUMBER.match(value) if value else None
    return float(match.group(1)) if match else None


def to_int(value: str | None) -> int | None:
    """`81559 MiB` -> 81559; fractions are truncated; None for missing or non-numeric values."""
    number = to_float(value)
    return int(number) if number is not None else None


def is_lost_marker(value: str | None) -> bool:
    """True for values saying the GPU fell off the bus or needs a reset (`[GPU is lost]`)."""
    return value is not None and any(word in value.lower() for word in _LOST_WORDS)


def normalize_bus_id(bus_id: str) -> str:
    """`00000000:04:00.0`, `0000:04:00.0` and `GPU0000:04:00.0` compare equal: `04:00.0`."""
    parts = bus_id.strip().lower().removeprefix("gpu").split(":")
    return ":".join(parts[-2:])


# --- CSV ----------------------------------------------------------------------------------------


def _field_name(header_cell: str) -> str:
    name = header_cell.split("[", 1)[0].strip().lower()
    return _ALIASES.get(name, name)


def _looks_like_header(cells: Sequence[str]) -> bool:
    return all(_HEADER_CELL.match(c) for c in cells) and any(_field_name(c) in _KNOWN_FIELDS for c in cells)


def parse_csv(text: str, fields: Sequence[str]) -> list[dict[str, str | None]]:
    """Rows of nvidia-smi CSV as `{field: raw value or None}`.

    A header line, when present, names the columns (in any order, units stripped); otherwise
    `fields` does. Extra cells are joined into the last column (it may hold a process name with
    commas); missing cells read None. Lines with a single cell (error messages such as "No
    devices were found") are skipped.
    """
    names = [_ALIASES.get(f, f) for f in fields]
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and _looks_like_header(header := [c.strip() for c in lines[0].split(",")]):
        names, lines = [_field_name(c) for c in header], lines[1:]
    rows: list[dict[str, str | None]] = []
    for line in lines:
        # maxsplit keeps commas inside the last column (a process name) where they belong
        cells = [c.strip() for c in line.split(",", max(len(names) - 1, 0))]
        if len(cells) < 2:
            continue
        rows.append({name: (cells[i] if i < len(cells) else None) for i, name in enumerate(names)})
    return rows


def _health(ecc_errors: int | None, lost: bool) -> dict[str, str]:
    reasons = []
    if lost:
        reasons.append("GPU is lost or requires a reset (fell off the bus)")
    if ecc_errors:
        reasons.append(f"{ecc_errors} uncorrected ECC error(s) since the driver loaded")
    return {"health": HEALTH_UNHEALTHY, "health_reason": "; ".join(reasons)} if reasons else {}


def _gpu_rows(text: str, fields: Sequence[str]) -> list[tuple[GpuFact, str]]:
    """GpuFacts from query-gpu CSV, each with its normalized bus id ('' when unknown)."""
    out: list[tuple[GpuFact, str]] = []
    for position, row in enumerate(parse_csv(text, fields)):
        uuid = clean(row.get("uuid"))
        if not uuid:  # cannot tell this GPU apart from any other: not a usable fact
            continue
        index = to_int(row.get("index"))
        # Newer drivers may report only the instant or average reading.
        powers = (row.get(k) for k in ("power.draw", "power.draw.instant", "power.draw.average"))
        power = next((p for v in powers if (p := to_float(v)) is not None), None)
        fact = GpuFact(
            uuid=uuid,
            index=index if index is not None else position,
            model=clean(row.get("name")) or "",
            memory_mb=to_int(row.get("memory.total")),
            memory_used_mb=to_int(row.get("memory.used")),
            utilization_pct=to_float(row.get("utilization.gpu")),
            temperature_c=to_float(row.get("temperature.gpu")),
            power_w=power,
            **_health(
                to_int(row.get("ecc.errors.uncorrected.volatile.total")), any(is_lost_marker(v) for v in row.values())
            ),
        )
        out.append((fact, normalize_bus_id(row.get("pci.bus_id") or "")))
    return out


def parse_query_gpu(text: str, fields: Sequence[str] = QUERY_GPU_FIELDS) -> tuple[GpuFact, ...]:
    """GPUs from `--query-gpu` CSV. Rows without a UUID are dropped; a missing index is the
    row's position. Uncorrected volatile ECC errors > 0 or a lost-GPU marker -> unhealthy."""
    return tuple(fact for fact, _ in _gpu_rows(text, fields))


def parse_compute_apps(
    text: str, fields: Sequence[str] = QUERY_COMPUTE_APPS_FIELDS
) -> dict[str, tuple[GpuProcess, ...]]:
    """Processes per GPU UUID from `--query-compute-apps` CSV. An unreadable pid
    (`[Not Supported]` on old GeForce drivers) is kept as `pid=None`: something still runs."""
    found: dict[str, list[GpuProcess]] = {}
    for row in parse_csv(text, fields):
        uuid = clean(row.get("gpu_uuid"))
        if uuid:
            pid, memory = to_int(row.get("pid")), to_int(row.get("used_gpu_memory"))
            process = GpuProcess(pid, memory, clean(row.get("process_name")) or "")
            found.setdefault(uuid, []).append(process)
    return {uuid: tuple(procs) for uuid, procs in found.items()}


# --- nvidia-smi -L ------------------------------------------------------------------------------


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


# --- nvidia-smi -q -x ---------------------------------------------------------------------------


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
        uuid = _text(gpu, "uuid")
        if not uuid:
            continue
        power = None
        for readings in ("gpu_power_readings", "power_readings"):
            for name in ("power_draw", "instant_power_draw", "average_power_draw"):
                power = power if power is not None else to_float(_text(gpu, f"{readings}/{name}"))
        lost = (_text(gpu, "gpu_reset_status/reset_required") or "").lower() == "yes" or any(
            is_lost_marker(el.text) for el in gpu.iter()
        )
        health = _health(_xml_ecc_uncorrected(gpu.find("ecc_errors/volatile")), lost)
        procs = _xml_processes(gpu)
        model = _text(gpu, "product_name") or ""
        parent = GpuFact(
            uuid=uuid,
            index=position,
            model=model,
            memory_mb=to_int(_text(gpu, "fb_memory_usage/total")),
            memory_used_mb=to_int(_text(gpu, "fb_memory_usage/used")),
            utilization_pct=to_float(_text(gpu, "utilization/gpu_util")),
            temperature_c=to_float(_text(gpu, "temperature/gpu_temp")),
            power_w=power,
            processes=tuple(procs.pop(("", ""), [])),
            **health,
        )
        slices = []
        for mig in gpu.findall("mig_devices/mig_device"):
            gi, ci = _text(mig, "gpu_instance_id") or "", _text(mig, "compute_instance_id") or ""
            ecc = _xml_ecc_uncorrected(mig.find("ecc_error_count/volatile_count"))
            slices.append(
                GpuFact(
                    uuid=_text(mig, "uuid") or f"MIG-{uuid}/{gi}/{ci}",
                    index=to_int(mig.findtext("index")) or 0,
                    model=model,
                    memory_mb=to_int(_text(mig, "fb_memory_usage/total")),
                    memory_used_mb=to_int(_text(mig, "fb_memory_usage/used")),
                    parent_uuid=uuid,
                    processes=tuple(procs.pop((gi, ci), [])),
                    **(health or _health(ecc, False)),
                )
            )
        # Processes whose MIG instance we could not match still belong on the physical GPU.
        leftover = tuple(p for ps in procs.values() for p in ps)
        facts.extend([replace(parent, processes=parent.processes + leftover), *slices])
    driver = _text(root, "driver_version") or ""
    return XmlReport(driver, _text(root, "cuda_version") or "", tuple(facts))


# --- the SSH agent's combined report -------------------------------------------------------------


def split_sections(text: str) -> tuple[dict[str, tuple[str, int | None]], str | None]:
    """`{section: (body, exit status)}` and the missing command, if the script said so.

    The report is a sequence of `@@gpupool section NAME`, body lines, `@@gpupool rc N`; the
    script prints `@@gpupool missing CMD` instead when the command is not on the host.
    """
    sections: dict[str, tuple[str, int | None]] = {}
    current: str | None = None
    body: list[str] = []
    missing = None
    for line in text.splitlines():
        if not line.startswith(REPORT_MARK + " "):
            if current is not None:
                body.append(line)
            continue
        verb, _, arg = line[len(REPORT_MARK) + 1 :].partition(" ")
        if verb == "section":
            current, body = arg.strip(), []
            sections[current] = ("", None)
        elif verb == "rc" and current is not None:
            sections[current] = ("\n".join(body), to_int(arg))
            current = None
        elif verb == "missing":
            missing = arg.strip()
    if current is not None:  # cut short (timeout, killed): keep what arrived
        sections[current] = ("\n".join(body), None)
    return sections, missing


def _mark_lost(facts: Iterable[tuple[GpuFact, str]], lost: Sequence[LostGpu]) -> list[GpuFact]:
    by_bus = {item.bus_id: item for item in lost}
    out = []
    for fact, bus in facts:
        if bus and bus in by_bus:
            reason = "; ".join(r for r in (fact.health_reason, by_bus[bus].message) if r)
            fact = replace(fact, health=HEALTH_UNHEALTHY, health_reason=reason)
        out.append(fact)
    return out


def read_host_report(text: str) -> HostReport:
    """Everything one host's combined report says (see `split_sections` for the framing).

    GPUs come from the query-gpu section, MIG devices (and any GPU query-gpu missed) from `-L`,
    processes from compute-apps; MIG devices inherit their parent's ill health. Raises
    NvidiaSmiError, with nvidia-smi's own words, when the command is missing or query-gpu
    failed without listing a single GPU. "No devices were found" is an empty, healthy answer.
    """
    sections, missing = split_sections(text)
    if missing is not None:
        raise NvidiaSmiError(f"nvidia-smi not found on the host (looked for {missing!r})")
    if SECTION_QUERY_GPU not in sections:
        raise NvidiaSmiError("the host's report has no query-gpu section (output cut short?)")
    query_text, query_rc = sections[SECTION_QUERY_GPU]
    rows = _gpu_rows(query_text, QUERY_GPU_FIELDS)
    if not rows and query_rc != 0 and "no devices were found" not in query_text.lower():
        words = " ".join(query_text.split())[:300] or "no output"
        raise NvidiaSmiError(f"nvidia-smi --query-gpu failed (exit {query_rc}): {words}")
    all_text = "\n".join(body for body, _ in sections.values())
    lost = find_lost_gpus(all_text)
    gpus = _mark_lost(rows, lost)
    known_bus = {bus for _, bus in rows if bus}
    # The same lost GPU is usually reported by every section: one sentence per bus id.
    unmatched = {item.bus_id: item.message for item in lost if item.bus_id not in known_bus}
    problems = list(unmatched.values())
    for row in parse_csv(query_text, QUERY_GPU_FIELDS):
        if not clean(row.get("uuid")) and any(is_lost_marker(v) for v in row.values()):
            where = clean(row.get("pci.bus_id")) or f"index {row.get('index')}"
            problems.append(f"GPU at {where} is lost or requires a reset (no UUID readable)")

    by_uuid = {g.uuid: g for g in gpus}
    for listed in parse_list(sections.get(SECTION_LIST, ("", None))[0]):
        if listed.uuid in by_uuid:
            continue
        parent = by_uuid.get(listed.parent_uuid)
        if parent is not None and parent.health == HEALTH_UNHEALTHY:
            listed = replace(listed, health=parent.health, health_reason=parent.health_reason)
        by_uuid[listed.uuid] = listed
    procs = parse_compute_apps(sections.get(SECTION_COMPUTE_APPS, ("", None))[0])
    with_procs = [replace(g, processes=procs[g.uuid]) if g.uuid in procs else g
                  for g in by_uuid.values()]  # fmt: skip
    # Each GPU followed by its MIG devices, as `-L` lists them.
    facts = tuple(fact for gpu in with_procs if gpu.parent_uuid not in by_uuid
                  for fact in (gpu, *(m for m in with_procs if m.parent_uuid == gpu.uuid)))  # fmt: skip
    driver, cuda = parse_versions(sections.get(SECTION_VERSIONS, ("", None))[0])
    if not driver:  # old drivers without a -q header line: fall back to the CSV column
        columns = (clean(r.get("driver_version")) for r in parse_csv(query_text, QUERY_GPU_FIELDS))
        driver = next((d for d in columns if d), "")
    return HostReport(driver, cuda, facts, tuple(problems))


def parse_host_report(text: str) -> tuple[str, str, tuple[GpuFact, ...]]:
    """`(driver_version, cuda_version, gpus)` of one host's report; see `read_host_report`."""
    report = read_host_report(text)
    return report.driver_version, report.cuda_version, report.gpus
