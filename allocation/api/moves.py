"""Capacity moves by API: one GPU (`gpus/{uuid}/move/`), one whole host (`hosts/{id}/move/`), or any
GPUs and whole hosts into a pool (`pools/{name}/move/`, the dashboard's capacity page as a call).

`?dry_run=true` answers what the move would do and writes nothing: the preview of the dashboard's
capacity page, computed by the same function (`allocation.selectors.capacity_preview.capacity_preview`) and
rendered by `CapacityMoveSerializer` (who would be preempted, whether guarantees still fit, which
waiting leases could start, its `fingerprint`). A confirm (the same call without `dry_run`) may
carry that fingerprint: `capacity_move` recomputes the preview under the pools' scheduling locks and
refuses with 409 `preview_stale`, changing nothing, when the move would now do something else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.request import Request

from allocation.selectors.capacity_preview import HELD_ALONE, MODES, OUTCOMES, CapacityPreview, capacity_preview
from allocation.services.capacity import capacity_move
from core.api.schema import ErrorSerializer
from inventory.models import Gpu, Host, Pool

BIGINT = 2**63 - 1


class MoveQuerySerializer(serializers.Serializer[Any]):
    """The query of every move endpoint."""

    dry_run = serializers.BooleanField(
        required=False, default=False,
        help_text="true: answer what the move would do (the dashboard's preview, with its `fingerprint`) "
                  "and change nothing.")


def _pool_field() -> serializers.SlugRelatedField[Pool]:
    return serializers.SlugRelatedField(slug_field="name", queryset=Pool.objects.all(),
                                        help_text="Name of the pool to move the capacity to.")


def _fingerprint_field() -> serializers.CharField:
    return serializers.CharField(
        required=False, allow_blank=True, default="", max_length=64,
        help_text="The `fingerprint` of a dry run: the move happens only if it still does what that preview "
                  "said, else 409 `preview_stale` and nothing changes. Left out: moved as things are now.")


def _mode_field() -> serializers.ChoiceField:
    return serializers.ChoiceField(
        choices=list(MODES), default="keep", required=False,
        help_text="Leases on moved hosts: keep (cordon their hosts; they run on until they end) or drain "
                  "(drain their hosts: they are preempted with notice).")


class GpuMoveSerializer(serializers.Serializer[Any]):
    pool = serializers.SlugRelatedField(slug_field="name", queryset=Pool.objects.all(),
                                        help_text="Name of the pool to move the GPU (and its MIG slices) to.")
    fingerprint = _fingerprint_field()


class HostMoveSerializer(serializers.Serializer[Any]):
    pool = _pool_field()
    mode = _mode_field()
    fingerprint = _fingerprint_field()


class PoolMoveSerializer(serializers.Serializer[Any]):
    gpus = serializers.ListField(child=serializers.CharField(max_length=255), required=False, default=list,
                                 help_text="UUIDs of GPUs to move (a MIG GPU moves with its slices: name the GPU). "
                                           "A GPU held by a lease needs its whole host in `hosts`, unless "
                                           "`held_alone` is follow_lease.")
    hosts = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=BIGINT), required=False,
                                  default=list, help_text="Ids of hosts to move whole (every GPU on them).")
    mode = _mode_field()
    held_alone = serializers.ChoiceField(
        choices=list(HELD_ALONE), default="block", required=False,
        help_text="A held GPU picked without its host: block (the move is refused, as on the dashboard) "
                  "or follow_lease (it moves; the lease keeps it until it ends).")
    fingerprint = _fingerprint_field()

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs["gpus"] and not attrs["hosts"]:
            raise serializers.ValidationError({"gpus": ["give GPUs or hosts to move"]})
        found = dict(Gpu.objects.filter(uuid__in=attrs["gpus"], parent__isnull=True, gone=False)
                     .values_list("uuid", "pk"))
        missing = sorted(set(attrs["gpus"]) - set(found))
        if missing:
            raise serializers.ValidationError({"gpus": [f"no such GPU (or a MIG slice: name its GPU): {u}"
                                                        for u in missing[:10]]})
        hosts = set(Host.objects.filter(pk__in=attrs["hosts"]).values_list("pk", flat=True))
        if set(attrs["hosts"]) - hosts:
            raise serializers.ValidationError({"hosts": [f"no such host: {sorted(set(attrs['hosts']) - hosts)[0]}"]})
        return {**attrs, "gpu_ids": sorted(found.values()), "host_ids": sorted(hosts)}


# --- the answer ---------------------------------------------------------------------------------


class LeaseImpactSerializer(serializers.Serializer[Any]):
    lease = serializers.CharField(source="lease_id", help_text="Lease id.")
    team = serializers.CharField(help_text="Team of the lease.")
    pool = serializers.CharField(help_text="Pool of the lease (its quota is charged there).")
    state = serializers.CharField(help_text="Its state now.")
    gpu_count = serializers.IntegerField(help_text="GPUs it asked for.")
    gpus_moved = serializers.IntegerField(help_text="Of its GPUs, how many the move takes.")
    outcome = serializers.ChoiceField(choices=list(OUTCOMES), help_text=(
        "preempted (by the drain of its host), preempted_next_pass (the next scheduling pass would "
        "preempt it), over_limit (runs on, over its team's limit in the target pool), keeps_running, "
        "granted_next_pass (waiting; the next pass could grant it)."))
    # A declared field (SerializerMetaclass takes it off the class), not the stubs' `Field.label`.
    label = serializers.CharField(help_text="The outcome in words, as the dashboard shows it.")  # type: ignore[assignment]
    detail = serializers.CharField(help_text="Why, in words.")


class PoolChangeSerializer(serializers.Serializer[Any]):
    pool = serializers.CharField(help_text="Pool name.")
    capacity_before = serializers.IntegerField(help_text="Capacity now, GPUs (MIG slices count one each).")
    capacity_after = serializers.IntegerField(help_text="Capacity after the move.")
    guaranteed_total = serializers.IntegerField(help_text="Sum of the guarantees given in the pool.")
    shortfall = serializers.IntegerField(help_text="GPUs by which the guarantees exceed capacity after the "
                                                   "move; 0: they fit.")


class QuotaChangeSerializer(serializers.Serializer[Any]):
    team = serializers.CharField(help_text="Team name.")
    pool = serializers.CharField(help_text="Pool name.")
    guaranteed = serializers.IntegerField(help_text="The team's guarantee in the pool.")
    limit = serializers.IntegerField(allow_null=True, help_text="The team's limit in the pool; null: none.")
    held_before = serializers.IntegerField(help_text="GPUs of the pool the team occupies now.")
    held_after = serializers.IntegerField(help_text="GPUs of the pool the team would occupy after the move.")
    over_limit_by = serializers.IntegerField(help_text="GPUs over its limit after the move; 0: within it.")


class HostRefSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField(help_text="Host id.")
    name = serializers.CharField(help_text="Host name.")


@dataclass(frozen=True)
class MoveAnswer:
    preview: CapacityPreview
    dry_run: bool
    gpus: list[str]
    fence_hosts: list[dict[str, Any]]
    moved: int = 0


class CapacityMoveSerializer(serializers.Serializer[Any]):
    dry_run = serializers.BooleanField(help_text="true: a preview; nothing was changed.")
    pool = serializers.CharField(source="preview.target", help_text="The target pool.")
    mode = serializers.ChoiceField(choices=list(MODES), source="preview.mode",
                                   help_text="keep or drain (what happens to leases on moved hosts).")
    gpus = serializers.ListField(child=serializers.CharField(), help_text=(
        "UUIDs of the GPUs that move (or moved); GPUs already in the target pool are left out."))
    units = serializers.IntegerField(source="preview.units", help_text="Capacity moved: GPUs, a MIG GPU "
                                                                       "counted by its slices.")
    fence_hosts = HostRefSerializer(many=True, help_text="Hosts holding leases, cordoned (keep) or drained "
                                                         "(drain) before the move.")
    guarantees_ok = serializers.BooleanField(source="preview.guarantees_ok", help_text=(
        "Whether every affected pool's guarantees still fit in its capacity after the move (see `pools`)."))
    preempted = LeaseImpactSerializer(source="preview.preempted", many=True, help_text=(
        "Leases the move preempts: drained with their host, or by the next scheduling pass."))
    could_start = LeaseImpactSerializer(source="preview.could_start", many=True, help_text=(
        "Waiting leases the next scheduling pass could grant because of the move."))
    leases = LeaseImpactSerializer(source="preview.leases", many=True, help_text=(
        "Every lease the move concerns, with its outcome (`preempted` and `could_start` are parts of it). "
        "A confirm without a fingerprint leaves out the next pass's outcomes."))
    pools = PoolChangeSerializer(source="preview.pools", many=True, help_text="Capacity of each affected pool "
                                                                              "before and after.")
    quotas = QuotaChangeSerializer(source="preview.quotas", many=True, help_text=(
        "GPUs each team occupies per affected pool, before and after, against its quota."))
    blocked = serializers.ListField(child=serializers.CharField(), source="preview.blocked", help_text=(
        "Why the move cannot be made as asked (a confirm is a 409 `move_blocked`); empty: it can."))
    notes = serializers.ListField(child=serializers.CharField(), source="preview.notes",
                                  help_text="What else to know, in words.")
    can_confirm = serializers.BooleanField(source="preview.can_confirm", help_text=(
        "Something would move and nothing blocks it."))
    fingerprint = serializers.CharField(source="preview.fingerprint", help_text=(
        "Names what the preview says; give it to the confirm to refuse a move that would now do otherwise."))
    moved = serializers.IntegerField(help_text="GPU rows moved, MIG slices included (0 on a dry run).")


def move_answer(preview: CapacityPreview, *, dry_run: bool, moved: int = 0) -> dict[str, Any]:
    """The API's JSON for a preview (and, after a confirm, what was moved)."""
    uuids = dict(Gpu.objects.filter(pk__in=preview.gpu_ids).values_list("pk", "uuid"))
    hosts = Host.objects.filter(pk__in=preview.fence_host_ids).order_by("name").values("id", "name")
    answer = MoveAnswer(preview=preview, dry_run=dry_run, gpus=[uuids[pk] for pk in preview.gpu_ids if pk in uuids],
                        fence_hosts=[dict(h) for h in hosts], moved=moved)
    return dict(CapacityMoveSerializer(answer).data)


def is_dry_run(request: Request) -> bool:
    query = MoveQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    return bool(query.validated_data["dry_run"])


def preview_or_move(request: Request, *, pool: Pool, gpu_ids: Sequence[int] = (), host_ids: Sequence[int] = (),
                    mode: str = "keep", held_alone: str = "block", fingerprint: str = "") -> dict[str, Any]:
    """A dry run's preview, or the move (checked against `fingerprint` when given) and what it did."""
    if is_dry_run(request):
        preview = capacity_preview(pool=pool, gpu_ids=gpu_ids, host_ids=host_ids, mode=mode, held_alone=held_alone)
        return move_answer(preview, dry_run=True)
    result = capacity_move(pool=pool, gpu_ids=gpu_ids, host_ids=host_ids, mode=mode, held_alone=held_alone,
                           fingerprint=fingerprint, actor=request.user.get_username())
    return move_answer(result.preview, dry_run=False, moved=result.moved)


CONFLICT = OpenApiResponse(response=ErrorSerializer, description=(
    "`preview_stale`: the `fingerprint` no longer matches what the move would do (the fleet or its leases "
    "changed since the dry run); nothing changed, preview again. `move_blocked`: a GPU held by a lease "
    "was picked without its host."))
DRY_RUN_DOC = ("With `?dry_run=true` it answers what the move would do, exactly as the dashboard's capacity "
               "page previews it, and changes nothing. A confirm may carry the preview's `fingerprint`; "
               "it is then refused with 409 `preview_stale` (nothing changed) if the move would now do "
               "otherwise.")
