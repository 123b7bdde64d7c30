"""`POST /api/v1/leases/batch/`: up to 1,000 lease requests in one call and one transaction
(allocation.services.lease_batch), for pipelines that submit many jobs.

The body is `{"leases": [ITEM, …], "atomic": false}`, each ITEM the single create's body plus an
optional `idempotency_key` (the single create's Idempotency-Key header, per item). An unknown field
anywhere, a `leases` that is not a list of 1 to 1,000 items, or a body over the 1 MiB limit is a 400
(413) for the whole call, and nothing is written. Otherwise the answer is 200 with one result per
item, in order: `{"index", "status", "lease"}` (201 created, 200 the earlier lease of a repeated key
and body) or `{"index", "status", "error": {code, message, details}}`, the status and error body the
single create would have answered for that item alone. By default each item stands alone: invalid
ones are reported and the valid ones created. With `"atomic": true` one failed item fails the batch:
400 `batch_failed`, nothing written, `details.results` saying what each item was (the would-be-created
have status 424 `batch_aborted`).

The per-user lease rate (allocation.api.throttles) counts each item: a batch of N takes N tokens;
items past the tokens left are 429 `throttled` (and when no token is left at all, the call is).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from allocation.api.lease_json import lease_dict
from allocation.api.lease_topology import LeaseCreateSerializer, LeaseSerializer
from allocation.api.throttles import LeaseCreateThrottle
from allocation.services.lease_batch import MAX_ITEMS, BatchItem, ItemResult, lease_create_batch
from core.api.errors import error_body, exception_handler
from core.api.renderers import JSONParser
from core.api.schema import ErrorSerializer
from core.errors import DomainError

# JSON only: a list of objects has no form encoding (a form's `atomic=0` or `leases` as text would
# be read loosely, and the schema would have to document them).
PARSERS = [JSONParser]


class LeaseBatchItemSerializer(LeaseCreateSerializer):
    idempotency_key = serializers.CharField(
        required=False, allow_blank=True, max_length=255, default="",
        help_text="This item's Idempotency-Key (the single create's header): the same key and body return "
                  "the first lease (status 200), the same key with another body is 409 "
                  "`idempotency_key_reused`.")

    def validate_idempotency_key(self, value: str) -> str:
        if not value.isprintable():
            raise serializers.ValidationError("at most 255 printable characters")
        return value


class LeaseBatchSerializer(serializers.Serializer[Any]):
    """The request as documented (items in full, for the schema and the strict unknown-field check);
    items are validated one by one, so that one bad item does not hide the others' results."""

    leases = serializers.ListField(child=LeaseBatchItemSerializer(), min_length=1, max_length=MAX_ITEMS,
                                   help_text=f"The lease requests, 1 to {MAX_ITEMS}.")
    atomic = serializers.BooleanField(required=False, default=False,
                                      help_text="true: one failed item fails the whole batch and nothing is "
                                                "written (400 `batch_failed`); false: each item stands alone.")


class _Envelope(serializers.Serializer[Any]):
    leases = serializers.ListField(child=serializers.JSONField(), min_length=1, max_length=MAX_ITEMS)
    atomic = serializers.JSONField(required=False)  # absent: False

    def validate_atomic(self, value: Any) -> bool:
        if not isinstance(value, bool):  # not DRF's lenient "0", 1, "yes": it decides what is written
            raise serializers.ValidationError("Must be a valid boolean.")
        return value


class LeaseBatchResultSerializer(serializers.Serializer[Any]):
    index = serializers.IntegerField(help_text="The item's position in `leases`.")
    status = serializers.IntegerField(help_text="What the single create would have answered: 201 created, 200 "
                                                "replayed (repeated key and body), else the error's status.")
    lease = LeaseSerializer(required=False, help_text="The lease (created or replayed).")
    error = ErrorSerializer(required=False, help_text="The item's error body, as the single create's.")


class LeaseBatchResponseSerializer(serializers.Serializer[Any]):
    results = LeaseBatchResultSerializer(many=True, help_text="One result per item, in the order of `leases`.")
    created = serializers.IntegerField(help_text="How many leases this call created.")
    failed = serializers.IntegerField(help_text="How many items failed.")


DOCUMENTED = extend_schema(
    summary="Request many leases at once", request=LeaseBatchSerializer,
    responses={200: LeaseBatchResponseSerializer},
    description="Up to 1,000 lease requests in one transaction, each judged as `POST leases/` judges it "
                "(capacity, placement, budgets, queue caps, its own `idempotency_key`), with one result per "
                "item in order: the lease (201 created, 200 replayed) or its error body and status. Invalid "
                "items are reported and the valid ones created, unless `atomic` is true: then one failed item "
                "fails the call (400 `batch_failed`, `details.results` per item, nothing written). Each item "
                "takes one token of the per-user lease rate; items past the tokens left are 429 `throttled`, "
                "and a call with no token left at all is a 429. More than 1,000 items, an empty list, or an "
                "unknown field anywhere: 400 for the whole call. One scheduling pass is requested per pool.")


def batch_answer(request: Request) -> Response:
    envelope = _Envelope(data=request.data)
    envelope.is_valid(raise_exception=True)
    raw: list[Any] = envelope.validated_data["leases"]
    atomic: bool = envelope.validated_data.get("atomic", False)
    taken, wait_s = LeaseCreateThrottle().take(request, len(raw))
    if taken == 0:
        raise exceptions.Throttled(wait_s)
    answers: list[dict[str, Any] | None] = [None] * len(raw)
    items: list[tuple[int, BatchItem]] = []
    for index, data in enumerate(raw):
        if index >= taken:
            answers[index] = _error(index, exceptions.Throttled(wait_s))
            continue
        item = LeaseBatchItemSerializer(data=data)
        if not item.is_valid():
            answers[index] = _error(index, exceptions.ValidationError(item.errors))
            continue
        fields = dict(item.validated_data)
        key = fields.pop("idempotency_key")
        items.append((index, BatchItem(fields, key)))
    if atomic and any(a is not None for a in answers):
        return _aborted(answers, [(index, None) for index, _ in items])
    results = lease_create_batch(user=request.user, items=[item for _, item in items], atomic=atomic)
    if atomic and any(r.error is not None for r in results):
        return _aborted(answers, [(index, r) for (index, _), r in zip(items, results, strict=True)])
    for (index, _), result in zip(items, results, strict=True):
        answers[index] = _answer(index, result)
    done = [a for a in answers if a is not None]
    return Response({"results": done, "created": sum(a["status"] == 201 for a in done),
                     "failed": sum("error" in a for a in done)}, status=status.HTTP_200_OK)


def _answer(index: int, result: ItemResult) -> dict[str, Any]:
    if result.error is not None:
        return _error(index, result.error)
    assert result.lease is not None
    if result.created:  # a new lease holds no GPUs yet: nothing to read back
        return {"index": index, "status": 201, "lease": lease_dict(result.lease, gpus=[])}
    return {"index": index, "status": 200, "lease": lease_dict(result.lease)}


def _error(index: int, exc: Exception) -> dict[str, Any]:
    """The item's error as the single create would answer it (the API's one exception handler)."""
    response = exception_handler(exc, {})
    assert response is not None, f"no error body for {exc!r}"
    return {"index": index, "status": response.status_code, "error": response.data}


def _aborted(answers: list[dict[str, Any] | None], rest: list[tuple[int, ItemResult | None]]) -> Response:
    """400 `batch_failed` of an atomic batch: nothing was written; each item says what it was."""
    for index, result in rest:
        if result is not None and result.error is not None:
            answers[index] = _error(index, result.error)
        elif result is not None and result.lease is not None and not result.created:
            answers[index] = _answer(index, result)
        else:
            answers[index] = _error(index, DomainError("not written: another item of this atomic batch failed",
                                                       code="batch_aborted"))
            answers[index]["status"] = 424  # type: ignore[index]
    done = [a for a in answers if a is not None]
    failed = sum(a["status"] != 424 and "error" in a for a in done)
    return Response(error_body("batch_failed", f"{failed} of {len(done)} item(s) failed; nothing was written "
                                               "(atomic batch)", {"results": done}),
                    status=status.HTTP_400_BAD_REQUEST)
