"""Process bindings over the test sshd, seen from this machine: the "host" is this machine, so a
test looks at the started processes in /proc directly (tests/agents/test_ssh_bind.py, test_ssh_stop.py)."""

from __future__ import annotations

from pathlib import Path

from agents.base import BindRequest

UUIDS = ("GPU-63d1e50a-b952-d15c-0740-12bc14859142", "MIG-4d0efb7d-0970-51d9-b761-0686be6b8af3")


def request(lease_id: str, command: list[str], env: dict[str, str] | None = None) -> BindRequest:
    """A process binding of `command` on host gpu-a (the test sshd), holding UUIDS."""
    spec = {"kind": "process", "command": command, "env": env or {}}
    return BindRequest(lease_id=lease_id, host_name="gpu-a", host_address="127.0.0.1",
                       gpu_uuids=UUIDS, spec=spec)  # fmt: skip


def alive(pid: int) -> bool:
    """The process runs (zombies count as ended: PID 1 of a test container does not always reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
