"""`POST leases/batch/`: many lease requests in one call, each judged as the single create judges
it (errors, Idempotency-Keys, queue caps, the per-user rate), with one result per item."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache

from allocation.models import AuditEvent, Lease, LeaseOutbox

pytestmark = pytest.mark.django_db

URL = "/api/v1/leases/batch/"

CAPPED = """
pools: [{name: gpus, queue_caps: {pending_leases_per_team: 3, pending_gpus_per_team: 10}}]
teams: [{name: a, members: [ann]}]
sources:
  - {name: sim, kind: simulated, pool: gpus, hosts: 1, gpus_per_host: 8}
"""


def _post(client: Any, items: list[Any], **extra: Any) -> Any:
    return client.post(URL, {"leases": items, **extra}, format="json")


def _forget_buckets() -> None:
    from allocation.api.throttles import KEY_PREFIX
    from allocation.events import redis_client

    keys = list(redis_client().scan_iter(match=f"{KEY_PREFIX}:*", count=1000))
    if keys:
        redis_client().delete(*keys)


@pytest.fixture(autouse=True)
def fresh_buckets() -> Iterator[None]:
    cache.clear()
    _forget_buckets()
    yield
    _forget_buckets()


def test_valid_items_are_created_and_invalid_ones_reported_each_as_the_single_create_answers(
        world: Any, api: Any) -> None:
    client = api(world.member)
    before = Lease.objects.count()
    items = [{"pool": "training", "gpus": 1}, {"pool": "training", "gpus": 0},
             {"pool": "nowhere", "gpus": 1}, {"pool": "training", "gpus": 999},
             {"pool": "training", "gpus": 2, "model": "H100", "ttl_seconds": 600}, "not an object"]
    answer = _post(client, items)
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert [r["index"] for r in body["results"]] == list(range(6))
    assert [r["status"] for r in body["results"]] == [201, 400, 400, 400, 201, 400]
    assert body["created"] == 2 and body["failed"] == 4
    # Each error is the body the single create answers for that item alone.
    for index in (1, 2, 3):
        single = client.post("/api/v1/leases/", items[index], format="json")
        assert single.status_code == body["results"][index]["status"]
        assert single.json() == body["results"][index]["error"]
    created = [r["lease"] for r in body["results"] if r["status"] == 201]
    assert [(c["state"], c["gpu_count"], c["team"], c["pending_code"]) for c in created] == [
        ("pending", 1, "vision", "next_pass"), ("pending", 2, "vision", "next_pass")]
    assert client.get(f"/api/v1/leases/{created[1]['id']}/").json() == created[1]
    # Written as the single create writes: the lease, its audit event, its outbox row.
    assert Lease.objects.count() == before + 2 + 0  # the single creates above all failed
    for lease in created:
        assert AuditEvent.objects.filter(lease_id=lease["id"], action="lease.created").count() == 1
        assert LeaseOutbox.objects.filter(lease_id=lease["id"], state="pending").count() == 1


def test_an_atomic_batch_with_one_bad_item_writes_nothing(world: Any, api: Any) -> None:
    client = api(world.member)
    before = Lease.objects.count()
    answer = _post(client, [{"pool": "training", "gpus": 1}, {"pool": "training", "gpus": 999}], atomic=True)
    assert answer.status_code == 400
    body = answer.json()
    assert body["code"] == "batch_failed"
    assert [r["status"] for r in body["details"]["results"]] == [424, 400]
    assert body["details"]["results"][0]["error"]["code"] == "batch_aborted"
    assert Lease.objects.count() == before
    # An invalid body in an atomic batch too (before anything is judged).
    invalid = _post(client, [{"pool": "training", "gpus": 1}, {"pool": "training", "gpus": -1}], atomic=True)
    assert invalid.status_code == 400 and invalid.json()["code"] == "batch_failed"
    assert Lease.objects.count() == before
    ok = _post(client, [{"pool": "training", "gpus": 1}] * 3, atomic=True)
    assert ok.status_code == 200 and ok.json()["created"] == 3
    assert Lease.objects.count() == before + 3


def test_idempotency_keys_per_item_replay_and_conflict_as_the_header_does(world: Any, api: Any) -> None:
    client = api(world.member)
    first = client.post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json",
                        HTTP_IDEMPOTENCY_KEY="k-single")
    assert first.status_code == 201
    items = [{"pool": "training", "gpus": 1, "idempotency_key": "k-single"},      # the header's lease
             {"pool": "training", "gpus": 2, "idempotency_key": "k-single"},      # same key, other body
             {"pool": "training", "gpus": 1, "idempotency_key": "k1"},
             {"pool": "training", "gpus": 1, "idempotency_key": "k1"},            # again in this batch
             {"pool": "training", "gpus": 3, "idempotency_key": "k1"},            # other body
             {"pool": "training", "gpus": 1, "idempotency_key": "k\x01"}]         # not printable
    body = _post(client, items).json()
    assert [r["status"] for r in body["results"]] == [200, 409, 201, 200, 409, 400]
    results = body["results"]
    assert results[0]["lease"]["id"] == first.json()["id"]
    assert results[1]["error"]["code"] == results[4]["error"]["code"] == "idempotency_key_reused"
    assert results[3]["lease"]["id"] == results[2]["lease"]["id"]
    # A replay of the whole batch creates nothing more: the same leases come back.
    before = Lease.objects.count()
    again = _post(client, items[2:4]).json()
    assert [r["status"] for r in again["results"]] == [200, 200]
    assert {r["lease"]["id"] for r in again["results"]} == {results[2]["lease"]["id"]}
    assert Lease.objects.count() == before
    # The single create sees the batch's key too.
    single = client.post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json",
                         HTTP_IDEMPOTENCY_KEY="k1")
    assert single.status_code == 200 and single.json()["id"] == results[2]["lease"]["id"]


def test_queue_caps_admit_items_in_order_as_single_creates_would(apply_yaml: Any, make_user: Any,
                                                                   api: Any) -> None:
    ann = make_user("ann", teams=("a",))
    apply_yaml(CAPPED)
    client = api(ann)
    assert client.post("/api/v1/leases/", {"pool": "gpus", "gpus": 1}, format="json").status_code == 201
    body = _post(client, [{"pool": "gpus", "gpus": 8}, {"pool": "gpus", "gpus": 1},
                          {"pool": "gpus", "gpus": 1}, {"pool": "gpus", "gpus": 1}]).json()
    # 1 pending + 8 GPUs: 9 of 10; then 1 more GPU: 3 leases, the cap; the rest are over it.
    statuses = [r["status"] for r in body["results"]]
    assert statuses == [201, 201, 429, 429]
    assert body["results"][2]["error"]["code"] == "queue_full"
    assert body["results"][2]["error"]["details"]["cap"] == "pending_leases_per_team"
    assert body["results"][2]["error"]["details"]["pending_leases"] == 3
    assert Lease.objects.filter(state="pending").count() == 3


def test_more_than_1000_items_an_empty_list_or_unknown_fields_are_a_400_for_the_whole_call(
        world: Any, api: Any) -> None:
    client = api(world.member)
    before = Lease.objects.count()
    over = _post(client, [{"pool": "training", "gpus": 1}] * 1001)
    assert over.status_code == 400 and over.json()["code"] == "invalid"
    assert "leases" in over.json()["details"]
    assert _post(client, []).status_code == 400
    typo = _post(client, [{"pool": "training", "gpus": 1}, {"pool": "training", "gpu": 1}])
    assert typo.status_code == 400 and typo.json()["code"] == "unknown_field"
    assert typo.json()["details"] == {"leases.gpu": ["unknown field"]}
    top = _post(client, [{"pool": "training", "gpus": 1}], atomically=True)
    assert top.status_code == 400 and top.json()["details"] == {"atomically": ["unknown field"]}
    assert client.post(URL, {"pool": "training", "gpus": 1}, format="json").status_code == 400
    loose = _post(client, [{"pool": "training", "gpus": 1}], atomic="0")  # a boolean, not DRF's lenient "0"
    assert loose.status_code == 400 and "atomic" in loose.json()["details"]
    form = client.post(URL, {"leases": "[]", "atomic": "0"}, format="multipart")  # JSON only
    assert form.status_code == 415
    assert Lease.objects.count() == before


def test_1000_items_are_one_transaction_a_handful_of_statements_and_the_default_queue_cap(world: Any, api: Any,
                                                                      django_assert_max_num_queries: Any) -> None:
    client = api(world.member)
    items = [{"pool": "training", "gpus": 1 + i % 2, "idempotency_key": f"job-{i}"} for i in range(1000)]
    with django_assert_max_num_queries(40):
        answer = _post(client, items)
    body = answer.json()
    # The world's lease was pending already: the last item is over the default queue cap (1,000).
    assert answer.status_code == 200 and body["created"] == 999
    assert body["results"][-1]["error"]["code"] == "queue_full"
    assert Lease.objects.filter(idempotency_key__startswith="job-").count() == 999


def test_a_batch_of_n_takes_n_tokens_of_the_lease_rate(world: Any, api: Any, settings: Any) -> None:
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"lease_create": "5/min"}}
    client = api(world.member)
    body = _post(client, [{"pool": "training", "gpus": 1}] * 3).json()
    assert body["created"] == 3
    # 2 tokens left: the third item and on are throttled, as a sixth single create would be.
    body = _post(client, [{"pool": "training", "gpus": 1}] * 4).json()
    assert [r["status"] for r in body["results"]] == [201, 201, 429, 429]
    assert body["results"][2]["error"]["code"] == "throttled"
    empty = _post(client, [{"pool": "training", "gpus": 1}])
    assert empty.status_code == 429 and "Retry-After" in empty
    assert client.post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json").status_code == 429


def test_the_batch_endpoint_is_documented(schema: dict[str, Any]) -> None:
    operation = schema["paths"]["/api/v1/leases/batch/"]["post"]
    request = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    leases = schema["components"]["schemas"][request]["properties"]["leases"]
    assert leases["maxItems"] == 1000 and leases["minItems"] == 1
    item = schema["components"]["schemas"][leases["items"]["$ref"].rsplit("/", 1)[-1]]
    assert {"pool", "gpus", "idempotency_key"} <= set(item["properties"])
    assert "200" in operation["responses"]
