"""The system OpenSSH client logging in to the test sshd with a key of its own, as a user's
`gpupool ssh` does: for the shell tests (tests/agents/test_ssh_shells.py, the API and CLI ones)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.sshd import new_ed25519


@dataclass
class UserKey:
    """A user's ed25519 key pair on disk (the private half 0600, as ssh insists)."""

    private_file: Path
    public: str

    @classmethod
    def make(cls, folder: Path, name: str = "user") -> UserKey:
        folder.mkdir(parents=True, exist_ok=True)
        private, public = new_ed25519()
        path = folder / f"{name}_ed25519"
        path.write_text(private)
        path.chmod(0o600)
        return cls(path, public)


def ssh_argv(key: UserKey, *, address: str, port: int, user: str, host_key: str, known_hosts: Path) -> list[str]:
    """`ssh` with only this key, the host's key pinned, no user config, no prompts."""
    known_hosts.write_text(f"[{address}]:{port} {host_key}\n")
    return ["ssh", "-F", "/dev/null", "-i", str(key.private_file), "-o", "IdentitiesOnly=yes",
            "-o", "IdentityAgent=none", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={known_hosts}", "-o", "ConnectTimeout=5", "-p", str(port), f"{user}@{address}"]


def ssh_run(argv: list[str], command: str, *, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """Run `command` over ssh; stdout and stderr captured as text."""
    return subprocess.run([*argv, command], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
