"""nvidia-smi parsers on the real captures in tests/fixtures/nvidia-smi (provenance: tests/fixtures/SOURCES.md).

Each capture is parsed and checked value by value; edge cases the captures lack (lost GPUs, ECC
errors) are made by changing one value of a capture, never by inventing a whole output.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.base import HEALTH_OK, HEALTH_UNHEALTHY, GpuProcess
from agents.nvidia_smi import csv as smi_csv
from agents.nvidia_smi import report as smi_report
from agents.nvidia_smi import text as smi_text
from agents.nvidia_smi import values as smi_values
from agents.nvidia_smi import xml as smi_xml
from tests.support.sshd import FIXTURES, FLEETS, write_fleet

TITANX_FIELDS = (
    "index",
    "uuid",
    "name",
    "temperature.gpu",
    "utilization.gpu",
    "memory.used",
    "memory.total",
)  # fmt: skip  (gpustat's order, see fixtures/SOURCES.md #9)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_every_capture_is_covered_by_a_test_here() -> None:
    source = Path(__file__).read_text()
    assert sorted(p.name for p in FIXTURES.iterdir()) == sorted(
        p.name for p in FIXTURES.iterdir() if f'"{p.name}"' in source
    )
    assert len(list(FIXTURES.iterdir())) == 11


# --- query-gpu CSV --------------------------------------------------------------------------------


def test_h100_all_fields_csv_maps_columns_by_header_and_strips_units() -> None:
    (gpu,) = smi_csv.parse_query_gpu(fixture("h100-80gb-hbm3-mig-query-gpu-allfields.csv"))
    assert gpu.uuid == "GPU-00000000-0000-0000-0000-000000000000"
    assert gpu.model == "NVIDIA H100 80GB HBM3"
    assert (gpu.index, gpu.memory_mb, gpu.memory_used_mb) == (0, 81559, 11125)
    assert gpu.power_w == 433.78 and gpu.temperature_c == 53.0
    assert gpu.utilization_pct is None  # `[N/A]` under MIG
    assert gpu.health == HEALTH_OK  # ecc.errors.uncorrected.volatile.total is 0


def test_windows_rtx_csv_with_index_last_and_units_in_values() -> None:
    real, synthetic = smi_csv.parse_query_gpu(fixture("rtx-2080-super-windows-wddm-query-gpu.csv"))
    assert real.uuid == "GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa"
    assert real.model == "NVIDIA GeForce RTX 2080 SUPER"
    assert (real.index, real.memory_used_mb, real.memory_mb) == (0, 575, None)
    assert (synthetic.index, synthetic.memory_used_mb) == (1, 1234)


def test_p100_nounits_csv_keeps_header_units_and_reads_plain_numbers() -> None:
    (gpu,) = smi_csv.parse_query_gpu(fixture("tesla-p100-pcie-16gb-query-gpu-nounits.csv"))
    assert gpu.uuid == "GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6"
    assert gpu.model == "Tesla P100-PCIE-16GB"
    assert (gpu.memory_used_mb, gpu.utilization_pct, gpu.temperature_c) == (0, 0.0, 37.0)
    assert gpu.power_w == 28.16
    assert gpu.memory_mb is None  # memory.total was not asked for in that capture


def test_titanx_noheader_csv_not_supported_utilization_is_none() -> None:
    text = fixture("gtx-titan-x-3gpu-query-gpu-noheader-nounits.csv")
    gpus = smi_csv.parse_query_gpu(text, TITANX_FIELDS)
    assert [g.index for g in gpus] == [0, 1, 2]
    assert {g.model for g in gpus} == {"GeForce GTX TITAN X"}
    assert [g.utilization_pct for g in gpus] == [76.0, 0.0, None]
    assert [g.memory_used_mb for g in gpus] == [8000, 9000, 8520]
    assert [g.temperature_c for g in gpus] == [80.0, 36.0, 71.0]
    assert all(g.memory_mb == 12287 and g.power_w is None for g in gpus)
    assert gpus[2].uuid == "GPU-50205d95-57b6-f541-2bcb-86c09afed564"


def test_odd_values_read_as_none_and_lost_or_ecc_mark_unhealthy() -> None:
    line = (
        " 3 ,GPU-aaaa,  Tesla V100 ,  [Unknown Error], , [Insufficient Permissions],N/A,"
        "[Requested functionality has been deprecated], 00000000:3B:00.0, 535.1, 2\n"
        "4, GPU-bbbb, Tesla V100, [GPU requires reset], [GPU requires reset], 0, 30, 40, "
        "00000000:5E:00.0, 535.1, [N/A]\n"
    )
    ecc, lost = smi_csv.parse_query_gpu(line)
    assert (ecc.index, ecc.uuid, ecc.model) == (3, "GPU-aaaa", "Tesla V100")
    assert ecc.memory_mb is ecc.memory_used_mb is ecc.utilization_pct is ecc.power_w is None
    assert ecc.health == HEALTH_UNHEALTHY and "2 uncorrected ECC" in ecc.health_reason
    assert lost.health == HEALTH_UNHEALTHY and "fell off the bus" in lost.health_reason
    assert lost.memory_mb is None and lost.temperature_c == 30.0


def test_rows_without_uuid_and_error_lines_are_skipped() -> None:
    text = "No devices were found\n0, [N/A], Tesla T4\n"
    assert smi_csv.parse_query_gpu(text) == ()


# --- compute apps ---------------------------------------------------------------------------------


def test_titanx_compute_apps_keep_processes_with_unknown_pid() -> None:
    apps = smi_csv.parse_compute_apps(fixture("gtx-titan-x-3gpu-query-compute-apps-noheader-nounits.csv"))
    assert len(apps) == 3 and sum(len(p) for p in apps.values()) == 6
    assert apps["GPU-10fb0fbd-2696-43f3-467f-d280d906a107"] == (
        GpuProcess(pid=48448, used_memory_mb=4000),
        GpuProcess(pid=153223, used_memory_mb=4000),
    )
    last = apps["GPU-50205d95-57b6-f541-2bcb-86c09afed564"][-1]
    assert last == GpuProcess(pid=None, used_memory_mb=None)


def test_h100_compute_apps_with_header_and_names() -> None:
    apps = smi_csv.parse_compute_apps(fixture("h100-80gb-hbm3-mig-query-compute-apps.csv"))
    procs = apps["GPU-00000000-0000-0000-0000-000000000000"]
    assert [(p.pid, p.name, p.used_memory_mb) for p in procs] == [
        (21180, "/root/tools/memhog", 2296),
        (21181, "/root/tools/memhog", 1272),
        (21198, "./gpu_burn", 7484),
    ]


def test_process_name_with_commas_stays_whole() -> None:
    apps = smi_csv.parse_compute_apps("GPU-x, 42, 100, python train.py --a=1,2\n")
    assert apps["GPU-x"] == (GpuProcess(42, 100, "python train.py --a=1,2"),)


# --- nvidia-smi -L --------------------------------------------------------------------------------


def test_list_of_8_h100_with_56_mig_devices() -> None:
    facts = smi_text.parse_list(fixture("h100-80gb-hbm3-8gpu-mig-1g.10gb-list-L.txt"))
    gpus = [f for f in facts if not f.parent_uuid]
    migs = [f for f in facts if f.parent_uuid]
    assert len(gpus) == 8 and len(migs) == 56
    assert gpus[0].uuid == "GPU-63d1e50a-b952-d15c-0740-12bc14859142"
    assert [g.index for g in gpus] == list(range(8))
    assert {m.mig_profile for m in migs} == {"1g.10gb"}  # padding after the profile is dropped
    assert {m.model for m in facts} == {"NVIDIA H100 80GB HBM3"}
    assert migs[0].uuid == "MIG-4d0efb7d-0970-51d9-b761-0686be6b8af3"
    assert migs[0].parent_uuid == gpus[0].uuid and migs[0].index == 0
    assert migs[-1].uuid == "MIG-bc03b921-4d24-573e-9d4b-1cdc47b1f4b4"
    assert migs[-1].parent_uuid == gpus[7].uuid and migs[-1].index == 6
    for gpu in gpus:
        assert [m.index for m in migs if m.parent_uuid == gpu.uuid] == list(range(7))
    assert all(m.memory_mb is None for m in migs)


# --- nvidia-smi -q -x -----------------------------------------------------------------------------


def test_a100_v12_xml_with_four_mig_devices_and_na_utilization() -> None:
    report = smi_xml.parse_query_xml(fixture("a100-sxm4-80gb-mig-query-x.xml"))
    assert (report.driver_version, report.cuda_version) == ("535.54.03", "12.2")
    gpu, *migs = report.gpus  # attached_gpus says 4, the document holds one <gpu>
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.model == "NVIDIA A100-SXM4-80GB"
    assert (gpu.memory_mb, gpu.memory_used_mb, gpu.temperature_c, gpu.power_w) == (
        81920, 50, 27.0, 67.03)  # fmt: skip
    assert gpu.utilization_pct is None and gpu.health == HEALTH_OK and gpu.processes == ()
    assert [m.uuid for m in migs] == [f"MIG-{gpu.uuid}/{gi}/0" for gi in (3, 4, 5, 6)]
    assert {(m.parent_uuid, m.memory_mb, m.memory_used_mb) for m in migs} == {(gpu.uuid, 19968, 12)}
    assert [m.index for m in migs] == [0, 1, 2, 3]


def test_t4_v11_xml_processes_and_no_mig() -> None:
    report = smi_xml.parse_query_xml(fixture("tesla-t4-query-x-with-processes.xml"))
    assert (report.driver_version, report.cuda_version) == ("515.105.01", "11.7")
    (gpu,) = report.gpus
    assert (gpu.uuid, gpu.model) == ("GPU-d37e67a5-91dd-3774-a5cb-99096249601a", "Tesla T4")
    assert (gpu.memory_mb, gpu.memory_used_mb, gpu.utilization_pct) == (15360, 1032, 0.0)
    assert (gpu.temperature_c, gpu.power_w) == (40.0, 26.78)
    assert gpu.processes == (
        GpuProcess(675, 22, "/usr/lib/xorg/Xorg"),
        GpuProcess(5762, 1005, "python"),
    )


def test_p100_v8_xml_two_gpus_without_cuda_version() -> None:
    report = smi_xml.parse_query_xml(fixture("tesla-p100-pcie-12gb-2gpu-query-x-schema-v8.xml"))
    assert (report.driver_version, report.cuda_version) == ("375.66", "")
    first, second = report.gpus
    assert (first.model, second.model) == ("Tesla P100-PCIE-12GB", "Tesla P100-PCIE-12GB_2")
    assert (first.uuid, second.index) == ("GPU-28604e81-21ec-cc48-6759-bf2648b22e16", 1)
    assert (first.memory_mb, second.memory_mb) == (11567, 12290)
    assert (first.utilization_pct, second.utilization_pct) == (33.4, 10.3)
    assert (first.power_w, second.temperature_c) == (24.84, 34.0)
    assert first.health == second.health == HEALTH_OK


def test_xml_uncorrected_ecc_errors_mark_gpu_and_its_mig_devices_unhealthy() -> None:
    v8 = fixture("tesla-p100-pcie-12gb-2gpu-query-x-schema-v8.xml")
    volatile_double = "<double_bit>\n                    <device_memory>0</device_memory>"
    assert volatile_double in v8
    bad = smi_xml.parse_query_xml(
        v8.replace(volatile_double, volatile_double.replace(">0<", ">2<"), 1).replace(
            "<total>0</total>\n                </double_bit>\n            </volatile>",
            "<total>2</total>\n                </double_bit>\n            </volatile>", 1)
    )  # fmt: skip
    assert bad.gpus[0].health == HEALTH_UNHEALTHY and "2 uncorrected" in bad.gpus[0].health_reason
    assert bad.gpus[1].health == HEALTH_OK
    v12 = fixture("a100-sxm4-80gb-mig-query-x.xml").replace(
        "<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>1</dram_uncorrectable>", 1
    )
    a100 = smi_xml.parse_query_xml(v12)
    assert {g.health for g in a100.gpus} == {HEALTH_UNHEALTHY}  # the GPU and its 4 slices


def test_xml_that_is_not_xml_raises_in_words() -> None:
    with pytest.raises(smi_values.NvidiaSmiError, match="not XML"):
        smi_xml.parse_query_xml("NVIDIA-SMI has failed because it couldn't communicate")


# --- the remote script's report -----------------------------------------------------------------


def report(sections: dict[str, tuple[str, int]]) -> str:
    out = []
    for name, (body, rc) in sections.items():
        out += [f"{smi_report.REPORT_MARK} section {name}", body.rstrip("\n"), f"{smi_report.REPORT_MARK} rc {rc}"]
    return "\n".join(out) + "\n"


def fleet_report(fleet: Path) -> str:
    files = {smi_report.SECTION_VERSIONS: "q", smi_report.SECTION_QUERY_GPU: "query-gpu",
             smi_report.SECTION_LIST: "list", smi_report.SECTION_COMPUTE_APPS: "compute-apps",
             smi_report.SECTION_TOPO: "topo"}  # fmt: skip
    return report({
        name: ((fleet / f"{f}.txt").read_text(),
               int((fleet / f"{f}.rc").read_text()) if (fleet / f"{f}.rc").exists() else 0)
        for name, f in files.items() if (fleet / f"{f}.txt").exists()
    })  # fmt: skip


@pytest.fixture(scope="module")
def fleets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleets")
    for name in FLEETS:
        write_fleet(root, name)
    return root


def test_report_of_h100_mig_host_merges_csv_and_list(fleets: Path) -> None:
    driver, cuda, gpus = smi_report.parse_host_report(fleet_report(fleets / "h100-mig"))
    assert (driver, cuda) == ("590.48.01", "")
    parents = [g for g in gpus if not g.parent_uuid]
    assert len(parents) == 8 and len(gpus) == 64
    assert all(p.memory_mb == 81559 and p.power_w == 433.78 for p in parents)
    assert gpus[1].parent_uuid == parents[0].uuid == "GPU-63d1e50a-b952-d15c-0740-12bc14859142"


def test_report_of_h100_host_puts_every_gpu_and_mig_device_in_its_nvswitch_island(fleets: Path) -> None:
    _, _, gpus = smi_report.parse_host_report(fleet_report(fleets / "h100-mig"))
    assert {g.nvlink_island for g in gpus} == {"nvl0"}  # MIG devices in their parent's island
    _, _, (t4,) = smi_report.parse_host_report(fleet_report(fleets / "t4"))
    assert t4.nvlink_island == ""  # no topo section: unknown


def test_report_of_t4_host_has_versions_and_compute_process(fleets: Path) -> None:
    driver, cuda, (gpu,) = smi_report.parse_host_report(fleet_report(fleets / "t4"))
    assert (driver, cuda, gpu.model, gpu.memory_mb) == ("515.105.01", "11.7", "Tesla T4", 15360)
    assert gpu.processes == (GpuProcess(5762, 1005, "python"),)


def test_report_with_lost_gpu_keeps_the_healthy_one_and_says_why(fleets: Path) -> None:
    result = smi_report.read_host_report(fleet_report(fleets / "p100x2-lost"))
    assert [g.uuid for g in result.gpus] == ["GPU-28604e81-21ec-cc48-6759-bf2648b22e16"]
    assert len(result.problems) == 1 and "0000:82:00.0: GPU is lost" in result.problems[0]


def test_report_lost_gpu_is_matched_by_bus_id_across_formats() -> None:
    row = "0, GPU-aaaa, Tesla V100, 16384, 0, 0, 30, 40, 00000000:3B:00.0, 535.1, 0"
    lost = "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error"
    mig = "GPU 0: Tesla V100 (UUID: GPU-aaaa)\n  MIG 1g.5gb  Device  0: (UUID: MIG-cccc)"
    result = smi_report.read_host_report(report({"query-gpu": (f"{row}\n{lost}", 15),
                                           "list": (mig, 0)}))  # fmt: skip
    gpu, child = result.gpus
    assert gpu.health == HEALTH_UNHEALTHY and lost in gpu.health_reason
    assert child.health == HEALTH_UNHEALTHY and child.parent_uuid == "GPU-aaaa"
    assert result.problems == ()


def test_report_errors_are_raised_in_words(fleets: Path) -> None:
    with pytest.raises(smi_values.NvidiaSmiError, match="couldn't communicate with the NVIDIA driver"):
        smi_report.read_host_report(fleet_report(fleets / "nodriver"))
    with pytest.raises(smi_values.NvidiaSmiError, match="not found on the host"):
        smi_report.read_host_report(f"{smi_report.REPORT_MARK} missing nvidia-smi\n")
    with pytest.raises(smi_values.NvidiaSmiError, match="no query-gpu section"):
        smi_report.read_host_report("bash: warning: setlocale\n")


def test_report_without_devices_is_empty_not_an_error() -> None:
    text = report({"query-gpu": ("No devices were found", 6), "list": ("No devices found.", 6)})
    assert smi_report.parse_host_report(text) == ("", "", ())


def test_report_cut_short_keeps_what_arrived(fleets: Path) -> None:
    whole = fleet_report(fleets / "titanx")
    cut = whole[: whole.index(f"{smi_report.REPORT_MARK} section {smi_report.SECTION_LIST}")]
    assert len(smi_report.parse_host_report(cut)[2]) == 3


@pytest.mark.parametrize(
    ("line", "bus"),
    [
        ("Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost.  Reboot", "02:00.0"),
        ("Unable to determine the device handle for GPU0000:20:00.0: Unknown Error", "20:00.0"),
        ("Unable to detect the device handle for GPU0000:B1:00.0: Unknown Error", "b1:00.0"),
        ("Unable to determine the device handle for gpu 0000:86:00.0: Unknown Error", "86:00.0"),
    ],
)
def test_lost_gpu_lines_in_the_wordings_seen_in_the_field(line: str, bus: str) -> None:
    assert smi_text.find_lost_gpus(f"noise\n{line}\n") == [smi_values.LostGpu(bus, line)]


def test_versions_from_the_plain_banner() -> None:
    banner = "| NVIDIA-SMI 550.54.14              Driver Version: 550.54.14      CUDA Version: 12.4 |"
    assert smi_text.parse_versions(banner) == ("550.54.14", "12.4")


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789,. []:-\nGPUMIDNA/%abcxyz()@")), max_size=300))
def test_parsers_never_crash_on_garbage(text: str) -> None:
    smi_csv.parse_query_gpu(text)
    smi_csv.parse_compute_apps(text)
    smi_text.parse_list(text)
    smi_text.find_lost_gpus(text)
    with contextlib.suppress(smi_values.NvidiaSmiError):
        smi_report.read_host_report(text)


def test_the_discovery_report_of_a_real_h100() -> None:
    # The SSH connector's discovery script run on a real H100 (tests/fixtures/SOURCES.md, #11).
    text = (FIXTURES / "h100-80gb-hbm3-discover-report.txt").read_text()
    driver, cuda, gpus = smi_report.parse_host_report(text)
    assert (driver, cuda) == ("580.159.04", "13.0")
    (gpu,) = gpus
    assert (gpu.uuid, gpu.model, gpu.memory_mb, gpu.index) == (
        "GPU-e9d66b32-63d0-2736-653a-ea33304ce1e2", "NVIDIA H100 80GB HBM3", 81559, 0)
    assert (gpu.temperature_c, gpu.power_w, gpu.health, gpu.processes) == (32.0, 70.42, HEALTH_OK, ())
    assert gpu.nvlink_island == ""  # one GPU: no NVLink island
