"""A real OpenSSH server on 127.0.0.1 serving fake GPU hosts, for tests and the benchmark.

`SshServer` runs `/usr/sbin/sshd -D` from a temp dir with fresh keys (TESTING.md); it is ended by
its own pid. `FakeHost` puts a `nvidia-smi` command in a directory that prints a *fleet*: the
captured outputs in `tests/fixtures/nvidia-smi/` as the agent's remote script asks for them
(`tests/support/fake_nvidia_smi` does the answering; `write_fleet` prepares what it prints).
Switching a FakeHost's fleet between two syncs changes what the "host" has.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import getpass
import os
import shlex
import socket
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from agents.nvidia_smi.csv import QUERY_GPU_FIELDS as AGENT_QUERY_GPU_FIELDS
from stacktools.ready import free_port

SSHD = Path("/usr/sbin/sshd")
REPO = Path(__file__).resolve().parents[2]
#: The captured nvidia-smi outputs (tests/fixtures/SOURCES.md says where each comes from).
FIXTURES = REPO / "tests" / "fixtures" / "nvidia-smi"
FAKE_NVIDIA_SMI = Path(__file__).with_name("fake_nvidia_smi")
# The fake answers query-gpu only for the agent's field list, as real nvidia-smi answers only
# what was asked; a query for anything else is refused loudly.
QUERY_GPU_FIELDS = ",".join(AGENT_QUERY_GPU_FIELDS)
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
FLEETS = ("titanx", "titanx-2", "t4", "p100x2", "p100x2-lost", "h100-mig", "nodriver")


def sshd_missing_reason() -> str | None:
    """Why the real-sshd tests cannot run here, or None when they can."""
    if not SSHD.exists():
        return f"{SSHD} is absent (apt-get install -y openssh-server)"
    return None


def new_ed25519() -> tuple[str, str]:
    """(private key in OpenSSH PEM, public key line `ssh-ed25519 AAAA...`)."""
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private, public


@functools.cache
def sample_public_key() -> str:
    """One ed25519 public key line per test session, for configurations that only pin a key."""
    return new_ed25519()[1]


def pinned_config(**overrides: Any) -> dict[str, Any]:
    """A valid SSH source configuration (one host, its key pinned) that reaches no sshd."""
    return {"user": "gpu", "key_file": "/etc/gpupool/id_ed25519",
            "hosts": [{"address": "10.0.0.5", "port": 22, "host_key": sample_public_key()}], **overrides}  # fmt: skip


@contextlib.contextmanager
def sshd_or_skip(folder: Path) -> Iterator[SshServer]:
    """A running sshd of its own in `folder`; the test skips, saying why, where sshd cannot run."""
    reason = sshd_missing_reason()
    if reason:
        pytest.skip(f"real-sshd tier skipped: {reason}")
    with SshServer(folder) as server:
        yield server


class SshServer:
    """sshd on a free loopback port: `host_key` is the line to pin, `client_key` the PEM text
    of a key it accepts for `user`. Use as a context manager, or call start() and stop(). A
    start() after a stop() is the same server back: same port, same keys (a host rebooted)."""

    def __init__(self, directory: Path, *, login_rc: bool = False, env: dict[str, str] | None = None) -> None:
        self.dir = Path(directory)
        self.login_rc = login_rc
        # Set in every session (sshd's SetEnv): FAKE_HOST_FLEET gives this server's host a fleet
        # of its own when several servers share one FakeHost command.
        self.env = {**({} if login_rc else {"SHLVL": "1"}), **(env or {})}
        self.port = 0
        self.user = getpass.getuser()
        self.host_key = ""
        self.client_key = ""
        self.client_key_file = self.dir / "id_ed25519"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SshServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # privilege separation dir; sshd insists on it as root
            os.makedirs("/run/sshd", exist_ok=True)
        if not self.port:  # the first start; a later one brings the same server back
            self._new_keys()
            self.port = free_port()
        config = self.dir / "sshd_config"
        config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\n"
            f"HostKey {self.dir / 'host_ed25519'}\nPidFile {self.dir / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\n"
            "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUseDNS no\n"
            # Many hosts connect at once in tests and the benchmark; the default (10:30:100)
            # would drop unauthenticated connections at random beyond 10.
            "MaxStartups 1000\nMaxSessions 100\nLogLevel ERROR\nPrintMotd no\n"
            # bash sources ~/.bashrc for commands run by sshd unless SHLVL says it is nested;
            # this machine's root .bashrc runs `pyenv init` (~0.2 s a session), which is noise
            # in tests and benchmarks, not something a GPU host necessarily has. One SetEnv line:
            # sshd takes the first of several.
            + ("SetEnv " + " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items()) + "\n" if self.env else "")
        )
        with open(self.dir / "sshd.log", "wb") as log:  # the child keeps its own copy of the fd
            self._process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.dir / 'sshd.log').read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("sshd did not start listening within 10 s")

    def _new_keys(self) -> None:
        host_private, self.host_key = new_ed25519()
        self.client_key, client_public = new_ed25519()
        (self.dir / "host_ed25519").write_text(host_private)
        (self.dir / "host_ed25519").chmod(0o600)
        self.client_key_file.write_text(self.client_key)
        self.client_key_file.chmod(0o600)
        (self.dir / "authorized_keys").write_text(client_public + "\n")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()  # by its own pid, never by name
            try:
                self._process.wait(5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(5)
        self._process = None

    def host(self, name: str, **overrides: object) -> dict[str, object]:
        """A `hosts:` entry for the ssh source pointing at this server."""
        return {"address": "127.0.0.1", "port": self.port, "host_key": self.host_key,
                "name": name, **overrides}  # fmt: skip


class FakeHost:
    """A directory whose `nvidia-smi` prints the fleet chosen last with `use()`, or the fleet
    directory named by FAKE_HOST_FLEET where a host's sshd sets it (`SshServer(env=...)`)."""

    def __init__(self, directory: Path, fleets: Path) -> None:
        self.dir = Path(directory)
        self.fleets = Path(fleets)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.command = str(self.dir / "nvidia-smi")
        wrapper = self.dir / "nvidia-smi"
        wrapper.write_text(
            "#!/bin/sh\n"
            f'[ -n "$FAKE_HOST_FLEET" ] || read -r FAKE_HOST_FLEET < {shlex.quote(str(self.dir / "fleet"))}\n'
            'FAKE_NVIDIA_SMI_FLEET="$FAKE_HOST_FLEET"\n'
            "export FAKE_NVIDIA_SMI_FLEET\n"
            f'exec /bin/sh {shlex.quote(str(FAKE_NVIDIA_SMI))} "$@"\n'
        )
        wrapper.chmod(0o755)

    def use(self, fleet: str | Path) -> None:
        """Switch to a fleet by name, or to a fleet directory given by absolute path."""
        (self.dir / "fleet").write_text(str(self.fleets / fleet) + "\n")


# --- fleets ---------------------------------------------------------------------------------------


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def _csv_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in row] for row in csv.reader(text.splitlines()) if row]


def _gpu_line(values: dict[str, str]) -> str:
    return ", ".join(values.get(f, "[N/A]") for f in QUERY_GPU_FIELDS.split(","))


def _write(fleet: Path, **outputs: str) -> None:
    fleet.mkdir(parents=True, exist_ok=True)
    (fleet / "query-gpu.fields").write_text(QUERY_GPU_FIELDS + "\n")
    for name, text in outputs.items():
        (fleet / f"{name.replace('_', '-')}.txt").write_text(text)


def _q_header(driver: str, cuda: str = "") -> str:
    lines = ["", "==============NVSMI LOG==============", "",
             "Timestamp                                 : Mon Apr 24 16:22:39 2023",
             f"Driver Version                            : {driver}"]  # fmt: skip
    if cuda:
        lines.append(f"CUDA Version                              : {cuda}")
    return "\n".join(lines) + "\n"


def _from_xml(fixture: str) -> tuple[list[dict[str, str]], list[str], str, str]:
    """query-gpu values, compute-app lines, driver and CUDA version of an `-q -x` capture."""
    root = ET.fromstring(_fixture(fixture).strip())
    rows, apps = [], []
    for index, gpu in enumerate(root.findall("gpu")):
        power = gpu.findtext("power_readings/power_draw") or gpu.findtext("gpu_power_readings/power_draw")
        volatile = gpu.find("ecc_errors/volatile")
        ecc = volatile.findtext("double_bit/total") if volatile is not None else None
        rows.append({
            "index": str(index), "uuid": gpu.findtext("uuid", ""),
            "name": gpu.findtext("product_name", ""),
            "memory.total": gpu.findtext("fb_memory_usage/total", "").split()[0],
            "memory.used": gpu.findtext("fb_memory_usage/used", "").split()[0],
            "utilization.gpu": gpu.findtext("utilization/gpu_util", "").split()[0],
            "temperature.gpu": gpu.findtext("temperature/gpu_temp", "").split()[0],
            "power.draw": (power or "[N/A]").split()[0], "pci.bus_id": gpu.get("id", ""),
            "driver_version": root.findtext("driver_version", ""),
            "ecc.errors.uncorrected.volatile.total": ecc or "0",
        })  # fmt: skip
        for proc in gpu.findall("processes/process_info"):
            if proc.findtext("type") == "C":  # compute-apps lists compute processes only
                memory = proc.findtext("used_memory", "").split()[0]
                apps.append(f"{rows[-1]['uuid']}, {proc.findtext('pid')}, {memory}, "
                            f"{proc.findtext('process_name')}")  # fmt: skip
    driver, cuda = root.findtext("driver_version", ""), root.findtext("cuda_version", "")
    return rows, apps, driver, cuda


def _list(rows: list[dict[str, str]]) -> str:
    return "".join(f"GPU {r['index']}: {r['name']} (UUID: {r['uuid']})\n" for r in rows)


def write_fleet(fleets: Path, name: str) -> Path:
    """Write the outputs of fleet `name` (one of FLEETS) under `fleets/name` from the captures.

    titanx: 3 GeForce GTX TITAN X, query-gpu and compute-apps CSV as captured (one utilization
    `[Not Supported]`, one process with pid `[Not Supported]`); titanx-2: the same host after GPU
    2 vanished. t4 / p100x2: from the `-q -x` captures (values unchanged). p100x2-lost: the second
    P100 fell off the bus. h100-mig: the 8-GPU, 56-MIG-device `-L` capture, each GPU with the
    one captured H100 query-gpu row's telemetry,
    and the DGX H100 `topo -m` capture (one NVSwitch island). nodriver: the driver is not loaded.
    """
    fleet = fleets / name
    if name in ("titanx", "titanx-2"):
        order = ["index", "uuid", "name", "temperature.gpu", "utilization.gpu",
                 "memory.used", "memory.total"]  # fmt: skip
        rows = [dict(zip(order, r, strict=True)) for r in
                _csv_rows(_fixture("gtx-titan-x-3gpu-query-gpu-noheader-nounits.csv"))]  # fmt: skip
        apps = _fixture("gtx-titan-x-3gpu-query-compute-apps-noheader-nounits.csv").splitlines()
        if name == "titanx-2":
            gone = rows.pop(2)["uuid"]
            apps = [line for line in apps if not line.startswith(gone)]
        _write(fleet, query_gpu="".join(_gpu_line(r) + "\n" for r in rows), list=_list(rows),
               compute_apps="\n".join(apps) + "\n", q=_q_header("[N/A]"))  # fmt: skip
    elif name in ("t4", "p100x2", "p100x2-lost"):
        source = "tesla-t4-query-x-with-processes.xml" if name == "t4" else (
            "tesla-p100-pcie-12gb-2gpu-query-x-schema-v8.xml")  # fmt: skip
        rows, apps, driver, cuda = _from_xml(source)
        query, listing = "".join(_gpu_line(r) + "\n" for r in rows), _list(rows)
        if name == "p100x2-lost":
            lost = (f"Unable to determine the device handle for GPU {rows[1]['pci.bus_id']}: "
                    "GPU is lost.  Reboot the system to recover this GPU\n")  # fmt: skip
            query, listing = _gpu_line(rows[0]) + "\n" + lost, _list(rows[:1]) + lost
            (fleet / "query-gpu.rc").parent.mkdir(parents=True, exist_ok=True)
            (fleet / "query-gpu.rc").write_text("15\n")
        _write(fleet, query_gpu=query, list=listing, compute_apps="".join(a + "\n" for a in apps),
               q=_q_header(driver, cuda))  # fmt: skip
    elif name == "h100-mig":
        header, values = _csv_rows(_fixture("h100-80gb-hbm3-mig-query-gpu-allfields.csv"))
        # Values keep their units (`81559 MiB`), as captured; the parser must cope.
        captured = {h.split(" [")[0]: v for h, v in zip(header, values, strict=True)}
        listing = _fixture("h100-80gb-hbm3-8gpu-mig-1g.10gb-list-L.txt")
        gpus = [line for line in listing.splitlines() if line.startswith("GPU ")]
        rows = [{**captured, "index": str(i), "uuid": line.split("UUID: ")[1].rstrip(")")}
                for i, line in enumerate(gpus)]  # fmt: skip
        _write(fleet, query_gpu="".join(_gpu_line(r) + "\n" for r in rows), list=listing,
               compute_apps="", q=_q_header(captured["driver_version"]),
               topo=(FIXTURES.parent / "nvidia-smi-topo" / "dgx-h100-8gpu-nv18.txt").read_text())  # fmt: skip
    elif name == "nodriver":
        _write(fleet, query_gpu=NO_DRIVER, list=NO_DRIVER, compute_apps=NO_DRIVER, q=NO_DRIVER)
        for out in ("query-gpu", "list", "compute-apps", "q"):
            (fleet / f"{out}.rc").write_text("9\n")
    else:
        raise ValueError(f"unknown fleet {name!r}; known: {', '.join(FLEETS)}")
    return fleet


def write_fleets(fleets: Path) -> Path:
    for name in FLEETS:
        write_fleet(fleets, name)
    return fleets
