"""`nvidia-smi topo -m` parsing (agents/nvidia_smi/topo.py) on every captured fixture
(tests/fixtures/nvidia-smi-topo, sources in tests/fixtures/SOURCES.md) and on hand-made
matrices for the layouts no capture covers (NVLink-bridged pairs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.nvidia_smi.topo import parse_topo_matrix

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi-topo"

# file -> (GPU indexes, island sizes, NVLink count on the GPU0-GPU1 link or None)
EXPECTED = {
    "dgx-h100-8gpu-nv18.txt": (8, [8], 18),
    "dgx-a100-8gpu-nv12-partial.txt": (8, [8], 12),
    "h100-4gpu-nv6-nics.txt": (4, [4], 6),
    "gb200-4gpu-nv18.txt": (4, [4], 18),
    "pcie-8gpu-pix-pxb-sys.txt": (8, [], None),
    "rtx4090-8gpu-sys-only.txt": (8, [], None),
    "tesla-p4-1gpu.txt": (1, [], None),
    "h100-1gpu-real-escapes.txt": (1, [], None),
}


def test_every_fixture_has_an_expectation() -> None:
    assert sorted(p.name for p in FIXTURES.glob("*.txt")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture(name: str) -> None:
    gpus, sizes, nv01 = EXPECTED[name]
    matrix = parse_topo_matrix((FIXTURES / name).read_text())
    assert matrix.gpus == tuple(range(gpus))
    assert matrix.island_sizes() == sizes
    assert matrix.nvlinks.get((0, 1)) == nv01
    if sizes == [gpus]:  # NVSwitch: one island holding every GPU
        assert {matrix.island_of(i) for i in range(gpus)} == {"nvl0"}
    else:
        assert {matrix.island_of(i) for i in range(gpus)} == {""}


def test_the_terminal_escapes_the_real_tool_prints_do_not_hide_the_header() -> None:
    # nvidia-smi underlines the header row even into a pipe (the H100 capture has it); on an
    # NVSwitch host the islands must still be found.
    lines = (FIXTURES / "dgx-h100-8gpu-nv18.txt").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if "GPU0" in line)
    lines[header] = lines[header].replace("GPU0", "\x1b[4mGPU0", 1) + "\x1b[0m"
    assert "\x1b[4m" in (FIXTURES / "h100-1gpu-real-escapes.txt").read_text()
    assert parse_topo_matrix("\n".join(lines)).island_sizes() == [8]


def test_a_partial_capture_still_links_the_gpus_whose_rows_are_missing() -> None:
    # Only rows GPU0-GPU3 were captured; GPU4-GPU7 are linked through GPU0's row.
    matrix = parse_topo_matrix((FIXTURES / "dgx-a100-8gpu-nv12-partial.txt").read_text())
    assert matrix.island_of(7) == "nvl0"


def test_nvlink_bridged_pairs_are_islands_of_two() -> None:
    # Hand-made (no capture found): 4 GPUs, NVLink bridges on 0-1 and 2-3, PCIe between pairs.
    text = ("\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\n"
            "GPU0\t X \tNV4\tSYS\tSYS\t0-31\n"
            "GPU1\tNV4\t X \tSYS\tSYS\t0-31\n"
            "GPU2\tSYS\tSYS\t X \tNV4\t32-63\n"
            "GPU3\tSYS\tSYS\tNV4\t X \t32-63\n")
    matrix = parse_topo_matrix(text)
    assert [matrix.island_of(i) for i in range(4)] == ["nvl0", "nvl0", "nvl1", "nvl1"]


def test_dgx1_like_mixed_nv1_nv2_links_are_one_island() -> None:
    # Hand-made hybrid cube-mesh fragment: NV1/NV2 links chain all four GPUs.
    text = ("        GPU0    GPU1    GPU2    GPU3\n"
            "GPU0     X      NV1     NV1     NV2\n"
            "GPU1    NV1      X      NV2     SYS\n"
            "GPU2    NV1     NV2      X      SYS\n"
            "GPU3    NV2     SYS     SYS      X \n")
    matrix = parse_topo_matrix(text)
    assert matrix.island_sizes() == [4]
    assert matrix.nvlinks[(0, 3)] == 2


@pytest.mark.parametrize("text", ["", "No devices were found", "NVIDIA-SMI has failed because it couldn't "
                                  "communicate with the NVIDIA driver."])
def test_no_matrix_no_islands(text: str) -> None:
    assert parse_topo_matrix(text).islands == {}
