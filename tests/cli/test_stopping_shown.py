"""`show` says when an ended lease still holds its GPUs because its workload is being stopped."""

from __future__ import annotations

from gpupool_cli.leases import lease_block

LEASE = {"id": "8f0c1d2e-0000-4000-8000-000000000001", "state": "lost", "reason": "host offline: gpu-a",
         "team": "vision", "user": "alice", "pool": "vms", "gpus": ["GPU-1"], "gpu_count": 1, "host": "gpu-a",
         "model": "", "priority_class": "default", "created_at": "2030-01-01T00:00:00Z",
         "ended_at": "2030-01-01T01:00:00Z",
         "binding": {"kind": "process", "spec": {}, "status": {"state": "stopping"}}}


def test_show_says_the_gpus_are_held_with_the_attempts_and_the_next_one() -> None:
    stopping = {"since": "2030-01-01T01:00:00Z", "attempts": 4, "last_error": "SSH handshake failed",
                "permanent": False, "last_attempt_at": "2030-01-01T01:00:40Z",
                "next_attempt_at": "2030-01-01T01:01:20Z"}
    text = lease_block({**LEASE, "stopping": stopping})
    assert "binding:         process: stopping" in text
    assert "GPUs held: 4 failed attempt(s), last: SSH handshake failed; next at 2030-01-01T01:01:20Z" in text
    assert "GPUs held" not in lease_block({**LEASE, "stopping": None})
