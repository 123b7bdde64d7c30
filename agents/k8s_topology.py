"""NVLink islands of Kubernetes GPUs, from what the node and its ResourceSlices say.

* GPU Feature Discovery labels a node of a multi-node NVLink system (GB200 NVL72 and the like)
  with `nvidia.com/gpu.clique` (`<cluster uuid>.<clique id>`): every GPU of every node with the
  same value shares one NVLink domain, so the island is fleet-wide (`clique:<value>`).
* A DRA ResourceSlice device may carry a clique attribute (`cliqueID`/`cliqueId`, any domain
  prefix); where present, it names the device's island the same way and wins over the label.
* Without either, the GPUs of one node are taken as one island when GFD says the product is an
  SXM/HGX part (NVSwitch baseboards: every GPU of the node linked), else as in no island: the
  device plugin does not say which PCIe GPUs are bridged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from agents.base import GpuFact

CLIQUE_LABEL = "nvidia.com/gpu.clique"
PRODUCT_LABEL = "nvidia.com/gpu.product"
CLIQUE_ATTRIBUTES = ("cliqueID", "cliqueId")
# Product name parts of NVSwitch baseboards (every GPU of the node on one NVSwitch fabric).
_NVSWITCH_PARTS = ("SXM", "HGX", "DGX", "GB200", "GB300", "NVL")


def node_island(labels: Mapping[str, str]) -> str:
    """The island of a node's GPUs from its labels ("" none known)."""
    clique = labels.get(CLIQUE_LABEL, "").strip()
    if clique:
        return f"clique:{clique}"
    product = labels.get(PRODUCT_LABEL, "").upper()
    return "nvl0" if any(part in product for part in _NVSWITCH_PARTS) else ""


def attribute_island(attrs: Mapping[str, str]) -> str:
    """The island a DRA device's attributes name ("" none)."""
    for key in CLIQUE_ATTRIBUTES:
        if attrs.get(key):
            return f"clique:{attrs[key]}"
    return ""


def with_islands(gpus: Sequence[GpuFact], labels: Mapping[str, str]) -> tuple[GpuFact, ...]:
    """The GPUs with the node's island where they have none of their own."""
    island = node_island(labels)
    if not island:
        return tuple(gpus)
    return tuple(g if g.nvlink_island else replace(g, nvlink_island=island) for g in gpus)
