"""Time-sliced GPUs end to end (issue 12 part 4): two teams ask through the API for replicas of an
ssh host whose 2 GPUs are time-sliced 4 ways, `schedule` runs the passes. A physical GPU serves
one team at a time unless the pool shares across teams; the API and the dashboard show replicas
per physical GPU; a refused config changes nothing."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from agents.base import Discovery, GpuFact, HostFact
from agents.time_slicing import replicate
from allocation.models import Lease
from inventory.models import Gpu, Pool, Source
from inventory.sync import sync_source

pytestmark = pytest.mark.django_db

PHYSICAL = ("GPU-d37e67a5-91dd-3774-a5cb-99096249601a", "GPU-50205d95-57b6-f541-2bcb-86c09afed564")
CONFIG = """
pools: [{name: ts%(share)s}]
teams: [{name: a}, {name: b}]
priority_classes: [{name: default, value: 0}]
"""


@pytest.fixture
def teams(apply_yaml: Any, make_user: Any, api: Any) -> tuple[Any, Any, Any]:
    """Pool `ts`: host ts-0 of an ssh source, 2 Tesla T4 × 4 replicas; the API clients of a
    member of team a, one of team b, and a pool admin."""
    apply_yaml(CONFIG % {"share": ""})
    source = Source.objects.create(name="lab", kind="ssh", pool=Pool.objects.get(name="ts"), config={})
    gpus = tuple(GpuFact(uuid=uuid, index=i, model="Tesla T4", memory_mb=15360) for i, uuid in enumerate(PHYSICAL))
    sync_source(source, Discovery(hosts=(HostFact(name="ts-0", address="10.0.0.5", gpus=replicate(gpus, 4)),)))
    return (api(make_user("ann", teams=("a",))), api(make_user("ben", teams=("b",))),
            api(make_user("root", admin=True)))


def ask(client: Any, gpus: int) -> str:
    response = client.post("/api/v1/leases/", {"pool": "ts", "gpus": gpus}, format="json")
    assert response.status_code == 201, response.json()
    return str(response.json()["id"])


def schedule() -> None:
    call_command("schedule", stdout=StringIO())


def physical(lease_id: str) -> set[str]:
    """The physical GPUs of a lease's replicas (none while it waits)."""
    lease = Lease.objects.get(pk=lease_id)
    return set(Gpu.objects.filter(lease_links__lease=lease, lease_links__active=True)
               .values_list("physical_uuid", flat=True))


def apply_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "pools.yaml"
    path.write_text(text)
    out = StringIO()
    call_command("apply", "-f", str(path), stdout=out)
    return out.getvalue()


def test_two_teams_never_share_a_physical_gpu_unless_the_pool_says_so(teams: Any, tmp_path: Path) -> None:
    ann, ben, root = teams
    a1 = ask(ann, 2)
    schedule()
    (gpu_a,) = physical(a1)
    b1 = ask(ben, 2)
    schedule()
    (gpu_b,) = physical(b1)
    assert gpu_b != gpu_a  # team b gets the other GPU, never GPU 0's free replicas
    b2, b3 = ask(ben, 2), ask(ben, 1)
    schedule()
    assert physical(b2) == {gpu_b}  # the rest of its own GPU
    waiting = Lease.objects.get(pk=b3)
    assert waiting.state == "pending" and physical(b3) == set()
    assert "2 free time-sliced replicas are on GPUs in use by team a" in waiting.reason

    granted = {lease.pk: set(lease.gpu_links.values_list("gpu_id", flat=True)) for lease in Lease.objects.all()}
    with pytest.raises(CommandError, match="share_across_teams must be true or false"):
        apply_file(tmp_path, "pools:\n  - {name: ts, share_across_teams: sometimes}\n")
    schedule()
    assert not Pool.objects.get(name="ts").share_across_teams
    assert {lease.pk: set(lease.gpu_links.values_list("gpu_id", flat=True))
            for lease in Lease.objects.all()} == granted  # a refused config changes nothing

    changed = apply_file(tmp_path, "pools:\n  - {name: ts, share_across_teams: true}\n")
    assert "share_across_teams False → True" in changed
    schedule()
    assert Lease.objects.get(pk=b3).state == "granted" and physical(b3) == {gpu_a}  # b may share GPU 0 now
    assert root.get("/api/v1/pools/ts/").json()["share_across_teams"] is True


def test_the_api_and_the_dashboard_show_replicas_per_physical_gpu(teams: Any, client: Any) -> None:
    ann, ben, root = teams
    a1 = ask(ann, 2)
    schedule()
    (gpu_a,) = physical(a1)
    rows = root.get("/api/v1/gpus/?limit=100").json()["results"]
    assert len(rows) == 8 and {r["shared_replicas"] for r in rows} == {4}
    of_a = [r for r in rows if r["physical_uuid"] == gpu_a]
    assert sorted(r["uuid"] for r in of_a) == [gpu_a] + [f"{gpu_a}::ts{i}" for i in (1, 2, 3)]
    assert all(r["time_slicing"] == {"unit": gpu_a, "replicas": 4, "leased": 2, "teams": ["a"]} for r in of_a)
    other = next(r for r in rows if r["physical_uuid"] != gpu_a)
    assert other["time_slicing"]["leased"] == 0 and other["time_slicing"]["teams"] == []
    one = ben.get(f"/api/v1/gpus/{of_a[0]['uuid']}/").json()
    assert one["time_slicing"] == {"unit": gpu_a, "replicas": 4, "leased": 2, "teams": []}  # not ben's team

    users = get_user_model().objects
    client.force_login(users.get(username="ann"))
    assert f"{gpu_a}: 4 replicas, 2 leased by team a" in client.get("/fleet/").content.decode()
    client.force_login(users.get(username="ben"))
    assert f"{gpu_a}: 4 replicas, 2 leased by another team" in client.get("/fleet/").content.decode()
