"""`nvidia-smi topo -m` → NVLink islands: which GPUs of a host share NVLink or NVSwitch.

The matrix has a header row naming its columns (`GPU0 … GPUn`, then NICs, then `CPU Affinity`,
`NUMA Affinity`, `GPU NUMA ID`, whose names hold spaces) and one row per device; a GPU-to-GPU
cell is `X` (itself), `NV#` (a bonded set of # NVLinks) or a PCIe path (`PIX`, `PXB`, `PHB`,
`NODE`, `SYS`). An *island* is a connected component over the `NV#` links: on NVSwitch systems
(DGX A100 `NV12`, DGX H100 `NV18`) every GPU is linked to every other, one island; on a host
with NVLink bridges (pairs), each pair is one. A GPU with no NVLink is in no island.

Tolerant, like the other parsers here: columns and rows are matched by name (tabs or spaces),
NIC rows and the legend are ignored, a matrix cut short (rows missing) gives the islands the rows
it has imply (links are symmetric), and text without a matrix gives no islands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_GPU = re.compile(r"^GPU(\d+)$")
# The real tool underlines the header with terminal escapes even when its output is a pipe (seen
# on an H100, driver 580: `\x1b[4mGPU0 … \x1b[0m`); left in, no column is named GPU0.
_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NVLINK = re.compile(r"^NV(\d+)$")


@dataclass(frozen=True)
class TopoMatrix:
    """GPU indexes in column order; NVLink counts per pair (i < j); islands by GPU index."""

    gpus: tuple[int, ...] = ()
    nvlinks: dict[tuple[int, int], int] = field(default_factory=dict)
    islands: dict[int, int] = field(default_factory=dict)  # GPU index -> island number (0, 1, …)

    def island_of(self, index: int) -> str:
        """The island's name on its host (`nvl0`), "" for a GPU in none."""
        number = self.islands.get(index)
        return "" if number is None else f"nvl{number}"

    def island_sizes(self) -> list[int]:
        """Sizes of the islands, in island order."""
        sizes: dict[int, int] = {}
        for number in self.islands.values():
            sizes[number] = sizes.get(number, 0) + 1
        return [sizes[n] for n in sorted(sizes)]


def parse_topo_matrix(text: str) -> TopoMatrix:
    """The matrix of `nvidia-smi topo -m` (see the module docstring); empty when there is none."""
    columns: list[int] | None = None
    links: dict[tuple[int, int], int] = {}
    for line in _ESCAPE.sub("", text).splitlines():
        words = line.split()
        if not words:
            continue
        if columns is None:
            # The header: indented, or GPU names in a row (a device row has X or a link next).
            if _GPU.match(words[0]) and (line[:1].isspace() or len(words) < 2 or _GPU.match(words[1])):
                columns = [int(m.group(1)) for w in words if (m := _GPU.match(w))]
            continue
        row = _GPU.match(words[0])
        if row is None:
            if words[0].startswith("Legend"):
                break
            continue
        me = int(row.group(1))
        for other, cell in zip(columns, words[1 : 1 + len(columns)], strict=False):
            link = _NVLINK.match(cell)
            if link and other != me:
                links[(min(me, other), max(me, other))] = int(link.group(1))
    if columns is None:
        return TopoMatrix()
    return TopoMatrix(tuple(columns), links, _components(columns, links))


def _components(gpus: list[int], links: dict[tuple[int, int], int]) -> dict[int, int]:
    """Connected components over the links, numbered by their lowest GPU; unlinked GPUs left out."""
    parent = {g: g for g in gpus}

    def root(g: int) -> int:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    for a, b in links:
        parent.setdefault(a, a)
        parent.setdefault(b, b)
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    linked = sorted({g for pair in links for g in pair})
    numbers: dict[int, int] = {}
    out: dict[int, int] = {}
    for g in linked:
        out[g] = numbers.setdefault(root(g), len(numbers))
    return out
