"""The SSH agent's combined report: one host's sections (versions, query-gpu, `-L`, compute-apps)
→ what the host has. The remote script (`agents.ssh_scripts.discover_script`) writes the sections
this module reads; both take the section names from here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import NamedTuple

from agents.base import HEALTH_UNHEALTHY, GpuFact
from agents.nvidia_smi.csv import QUERY_GPU_FIELDS, gpu_rows, parse_compute_apps, parse_csv
from agents.nvidia_smi.text import find_lost_gpus, parse_list, parse_versions
from agents.nvidia_smi.topo import parse_topo_matrix
from agents.nvidia_smi.values import LostGpu, NvidiaSmiError, clean, is_lost_marker, to_int

# Section names of the SSH agent's remote report; the script and this parser must agree.
REPORT_MARK = "@@gpupool"
SECTION_VERSIONS = "versions"  # `nvidia-smi -q -d COMPUTE`: header has driver and CUDA versions
SECTION_QUERY_GPU = "query-gpu"
SECTION_LIST = "list"
SECTION_COMPUTE_APPS = "compute-apps"
SECTION_TOPO = "topo"  # `nvidia-smi topo -m`: NVLink islands (topo.py)


class HostReport(NamedTuple):
    """What one host's report says. `problems` are sentences about GPUs that could not be tied
    to a UUID (a lost GPU that no longer answers at all); inventory cannot list those."""

    driver_version: str
    cuda_version: str
    gpus: tuple[GpuFact, ...]
    problems: tuple[str, ...]


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
    rows = gpu_rows(query_text, QUERY_GPU_FIELDS)
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
    facts = _with_islands(facts, sections.get(SECTION_TOPO, ("", None))[0])
    driver, cuda = parse_versions(sections.get(SECTION_VERSIONS, ("", None))[0])
    if not driver:  # old drivers without a -q header line: fall back to the CSV column
        columns = (clean(r.get("driver_version")) for r in parse_csv(query_text, QUERY_GPU_FIELDS))
        driver = next((d for d in columns if d), "")
    return HostReport(driver, cuda, facts, tuple(problems))


def _with_islands(facts: tuple[GpuFact, ...], topo_text: str) -> tuple[GpuFact, ...]:
    """The facts with their NVLink island from `topo -m` (by GPU index; a MIG device is in its
    parent's). Without a matrix (old driver, section missing) they stay as they are."""
    matrix = parse_topo_matrix(topo_text)
    if not matrix.islands:
        return facts
    by_uuid = {f.uuid: matrix.island_of(f.index) for f in facts if not f.parent_uuid}
    return tuple(replace(f, nvlink_island=by_uuid.get(f.parent_uuid or f.uuid, "")) for f in facts)


def parse_host_report(text: str) -> tuple[str, str, tuple[GpuFact, ...]]:
    """`(driver_version, cuda_version, gpus)` of one host's report; see `read_host_report`."""
    report = read_host_report(text)
    return report.driver_version, report.cuda_version, report.gpus
