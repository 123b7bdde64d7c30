"""`nvidia-smi --query-gpu` and `--query-compute-apps` CSV → GPUs and their processes."""

from __future__ import annotations

import re
from collections.abc import Sequence

from agents.base import GpuFact, GpuProcess
from agents.nvidia_smi.values import clean, health, is_lost_marker, normalize_bus_id, to_float, to_int

#: Field order the SSH agent asks for with `--format=csv,noheader,nounits`. All are accepted by
#: nvidia-smi since the 300-series drivers (they appear in the 212-field H100 capture as well).
QUERY_GPU_FIELDS: tuple[str, ...] = (
    "index", "uuid", "name", "memory.total", "memory.used", "utilization.gpu", "temperature.gpu",
    "power.draw", "pci.bus_id", "driver_version", "ecc.errors.uncorrected.volatile.total",
)  # fmt: skip

#: Field order for `--query-compute-apps`. `process_name` is last on purpose: a process name may
#: contain commas, and the last column takes whatever is left of the line.
QUERY_COMPUTE_APPS_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "used_gpu_memory", "process_name")

_ALIASES = {"used_memory": "used_gpu_memory", "gpu_name": "name", "name": "name"}
_KNOWN_FIELDS = frozenset(QUERY_GPU_FIELDS + QUERY_COMPUTE_APPS_FIELDS) | frozenset(_ALIASES)
_HEADER_CELL = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(\s*\[[^\]]*\])?$")


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


def gpu_rows(text: str, fields: Sequence[str]) -> list[tuple[GpuFact, str]]:
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
        ecc_errors = to_int(row.get("ecc.errors.uncorrected.volatile.total"))
        state = health(ecc_errors, any(is_lost_marker(v) for v in row.values()))
        fact = GpuFact(
            uuid=uuid,
            index=index if index is not None else position,
            model=clean(row.get("name")) or "",
            memory_mb=to_int(row.get("memory.total")),
            memory_used_mb=to_int(row.get("memory.used")),
            utilization_pct=to_float(row.get("utilization.gpu")),
            temperature_c=to_float(row.get("temperature.gpu")),
            power_w=power,
            health=state.state,
            health_reason=state.reason,
        )
        out.append((fact, normalize_bus_id(row.get("pci.bus_id") or "")))
    return out


def parse_query_gpu(text: str, fields: Sequence[str] = QUERY_GPU_FIELDS) -> tuple[GpuFact, ...]:
    """GPUs from `--query-gpu` CSV. Rows without a UUID are dropped; a missing index is the
    row's position. Uncorrected volatile ECC errors > 0 or a lost-GPU marker -> unhealthy."""
    return tuple(fact for fact, _ in gpu_rows(text, fields))


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
