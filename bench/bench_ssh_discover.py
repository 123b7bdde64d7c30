"""How fast the SSH source reads a fleet: 100 hosts, parallel versus one at a time.

Runs one real sshd on 127.0.0.1 (tests/support/sshd.py) and points 100 host entries at it, each
host answering with the captured 8 x H100 (56 MIG devices) outputs through the fake nvidia-smi,
so every host costs what a real one does on our side: TCP + SSH handshake + key auth + one
remote script + parsing. Then the same source is read with max_parallel=1 for the baseline.

    python bench/bench_ssh_discover.py [--hosts 100] [--parallel 16] [--fleet h100-mig]

Needs /usr/sbin/sshd (apt-get install -y openssh-server). Prints one JSON object. Note that
client and server share this machine's cores here, so the figure is a floor for a real fleet,
where the remote side's work is spread over the hosts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.ssh import SshConnector
from tests.support.sshd import FakeHost, SshServer, sshd_missing_reason, write_fleet


def run_pass(config: dict[str, object], parallel: int) -> tuple[float, int, int, list[str]]:
    connector = SshConnector("bench", {**config, "max_parallel": parallel})
    started = time.perf_counter()
    discovery = connector.discover()
    wall = time.perf_counter() - started
    ready = [h for h in discovery.hosts if not h.error]
    errors = sorted({h.error for h in discovery.hosts if h.error})
    return wall, len(ready), sum(len(h.gpus) for h in ready), errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--fleet", default="h100-mig")
    parser.add_argument("--no-baseline", action="store_true", help="skip the sequential pass")
    parser.add_argument("--login-rc", action="store_true", help="let bash source ~/.bashrc in each session")
    args = parser.parse_args()
    reason = sshd_missing_reason()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    with (
        tempfile.TemporaryDirectory(prefix="bench-ssh-") as tmp,
        SshServer(Path(tmp) / "sshd", login_rc=args.login_rc) as server,
    ):
        write_fleet(Path(tmp) / "fleets", args.fleet)
        fake = FakeHost(Path(tmp) / "host", Path(tmp) / "fleets")
        fake.use(args.fleet)
        config: dict[str, object] = {
            "user": server.user,
            "private_key": server.client_key,
            "nvidia_smi": fake.command,
            "hosts": [server.host(f"gpu-{i:03d}") for i in range(args.hosts)],
            "command_timeout": 60,
        }
        run_pass(config, args.parallel)  # warm-up: imports, page cache, sshd first fork
        wall, ready, gpus, errors = run_pass(config, args.parallel)
        result: dict[str, object] = {
            "hosts": args.hosts,
            "ready": ready,
            "gpus_and_mig_devices": gpus,
            "max_parallel": args.parallel,
            "wall_s": round(wall, 3),
            "hosts_per_s": round(args.hosts / wall, 1),
            "cpus": os.cpu_count(),
            "login_rc": args.login_rc,
            "errors": errors,
        }
        if not args.no_baseline:
            seq_wall, _, _, seq_errors = run_pass(config, 1)
            result |= {
                "sequential_wall_s": round(seq_wall, 3),
                "sequential_hosts_per_s": round(args.hosts / seq_wall, 1),
                "speedup": round(seq_wall / wall, 2),
                "sequential_errors": seq_errors,
            }
        result["goal_under_10_s"] = wall < 10
    print(json.dumps(result, indent=2))
    return 0 if ready == args.hosts else 1


if __name__ == "__main__":
    sys.exit(main())
