"""`gpupool pools`, `gpus` and `hosts` print aligned tables of the fleet, with filters."""

from __future__ import annotations

import pytest


@pytest.mark.django_db(transaction=True)
def test_pools_prints_one_aligned_row_per_pool_with_capacity(server) -> None:
    code, out, err = server.run("pools")
    assert code == 0, err
    header, *rows = out.strip().splitlines()
    assert header.split()[:5] == ["POOL", "CAPACITY", "ALLOCATED", "FREE", "PENDING"]
    assert [r.split()[:4] for r in rows] == [["inference", "8", "0", "8"], ["training", "32", "0", "32"]]
    # Aligned: every column starts at the same offset on every line.
    assert header.index("CAPACITY") + len("CAPACITY") == rows[0].index(" 8 ") + 2


@pytest.mark.django_db(transaction=True)
def test_gpus_lists_the_fleet_and_filters_by_pool_model_state_and_host(server) -> None:
    code, out, _ = server.run("gpus")
    assert code == 0 and len(out.strip().splitlines()) == 1 + 40
    _, out, _ = server.run("gpus", "--pool", "inference")
    assert len(out.strip().splitlines()) == 1 + 8 and "A100" in out
    _, out, _ = server.run("gpus", "--model", "h100", "--state", "free", "--host", "demo-node-0")
    rows = out.strip().splitlines()[1:]
    assert len(rows) == 8 and all("demo-node-0" in r and "free" in r for r in rows)
    _, out, err = server.run("gpus", "--state", "leased")
    assert out == "" and err == "No GPUs found.\n"  # an empty list says so (issue 25), on stderr


@pytest.mark.django_db(transaction=True)
def test_hosts_shows_a_host_backing_off_with_its_failures_and_next_probe(server) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from inventory.models import Host

    Host.objects.filter(name="demo-node-1").update(probe_failures=4, error="cannot connect: connection refused",
                                                   next_probe_at=timezone.now() + timedelta(minutes=7, seconds=30))
    code, out, _ = server.run("hosts")
    header, *rows = out.strip().splitlines()
    assert code == 0 and header.split()[-4:] == ["FAILS", "NEXT", "PROBE", "ERROR"]
    (backing_off,) = [r for r in rows if "demo-node-1 " in r]
    assert backing_off.split()[-6:-4] == ["4", "7m"]
    assert backing_off.endswith("cannot connect: connection refused")
    assert all(r.split()[-3:] == ["-", "-", "-"] for r in rows if r is not backing_off)


@pytest.mark.django_db(transaction=True)
def test_hosts_lists_each_host_with_source_kind_and_state(server) -> None:
    code, out, _ = server.run("hosts")
    rows = out.strip().splitlines()
    assert code == 0 and rows[0].split()[:6] == ["ID", "HOST", "SOURCE", "KIND", "STATE", "GPUS"]
    assert len(rows) == 1 + 6 and all("simulated" in r and "ready" in r for r in rows[1:])
