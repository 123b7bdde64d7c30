"""`POST hosts/bulk/`: cordon, drain or uncordon many hosts in one call (pool admins), the
dashboard's bulk bar as an API. Hosts are named (ids or names) or picked by the fleet's filters
(pool, GPU state, model, name contains). `dry_run: true` answers the preview
(`allocation.selectors.host_bulk_preview`) with its fingerprint; a confirm may carry it, and is
refused with 409 `preview_stale` (nothing changed) when the change would now do otherwise."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from allocation.api.moves import LeaseImpactSerializer, PoolChangeSerializer
from allocation.selectors.host_bulk_preview import TARGET, BulkPreview, hosts_bulk_preview
from allocation.services.host_bulk import hosts_bulk_action
from inventory.choices import GpuState
from inventory.models import Gpu, Host, Pool

MAX_HOSTS = 5000


class HostFilterBodySerializer(serializers.Serializer[Any]):
    """The fleet page's filters: hosts with a GPU of this pool, model and state, named like `q`."""

    pool = serializers.SlugRelatedField(slug_field="name", queryset=Pool.objects.all(), required=False,
                                        help_text="Hosts with a GPU in this pool.")
    state = serializers.ChoiceField(choices=GpuState.choices, required=False,
                                    help_text="Hosts with a GPU in this state.")
    model = serializers.CharField(required=False, max_length=128, help_text="GPU model contains (H100).")
    q = serializers.CharField(required=False, max_length=128, help_text="Host name contains.")


class HostBulkSerializer(serializers.Serializer[Any]):
    action = serializers.ChoiceField(choices=list(TARGET), help_text=(
        "cordon (no new leases), drain (cordon and preempt their leases with notice) or uncordon."))
    hosts = serializers.ListField(child=serializers.CharField(max_length=255), required=False, max_length=MAX_HOSTS,
                                  help_text="Hosts by id or name (a name shared by hosts of two sources is "
                                            "refused: give the ids).")
    filter = HostFilterBodySerializer(required=False, help_text="Every host the fleet page's filters match "
                                                                "(instead of `hosts`).")
    dry_run = serializers.BooleanField(default=False, required=False, help_text=(
        "true: answer what the change would do (with its `fingerprint`) and change nothing."))
    fingerprint = serializers.CharField(required=False, allow_blank=True, default="", max_length=64, help_text=(
        "The `fingerprint` of a dry run: the change happens only if it still does what that preview said, "
        "else 409 `preview_stale`."))

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("hosts" in attrs) == ("filter" in attrs):
            raise serializers.ValidationError({"hosts": ["give either `hosts` or `filter`"]})
        ids = _named(attrs["hosts"]) if "hosts" in attrs else _filtered(attrs["filter"])
        if not ids:
            raise serializers.ValidationError({"filter": ["no host matches these filters"]})
        return {**attrs, "host_ids": ids}


def _named(refs: list[str]) -> list[int]:
    by_id = {r for r in refs if r.isdigit()}
    names = [r for r in refs if not r.isdigit()]
    found = {str(pk): pk for pk in Host.objects.filter(pk__in=[int(r) for r in by_id if len(r) < 19])
             .values_list("pk", flat=True)}
    rows = list(Host.objects.filter(name__in=names).values_list("name", "pk"))
    named: dict[str, list[int]] = {}
    for name, pk in rows:
        named.setdefault(name, []).append(pk)
    errors = [f"no such host: {r}" for r in sorted(by_id - set(found))]
    errors += [f"no such host: {n}" for n in sorted(set(names) - set(named))]
    errors += [f"host name {n} is on {len(pks)} sources: give the ids {sorted(pks)}"
               for n, pks in sorted(named.items()) if len(pks) > 1]
    if errors:
        raise serializers.ValidationError({"hosts": errors[:10]})
    return sorted(set(found.values()) | {pks[0] for pks in named.values()})


def _filtered(spec: dict[str, Any]) -> list[int]:
    gpus = Gpu.objects.filter(gone=False)
    if spec.get("pool"):
        gpus = gpus.filter(pool=spec["pool"])
    if spec.get("model"):
        gpus = gpus.filter(model__icontains=spec["model"])
    if spec.get("state"):
        gpus = gpus.filter(state=spec["state"])
    hosts = Host.objects.filter(pk__in=gpus.values("host_id"))
    if spec.get("q"):
        hosts = hosts.filter(name__icontains=spec["q"])
    return list(hosts.order_by("name").values_list("pk", flat=True)[:MAX_HOSTS])


class HostChangeSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField(source="host_id", help_text="Host id.")
    name = serializers.CharField(help_text="Host name.")
    admin_before = serializers.CharField(help_text="Its admin state now: '', cordoned or draining.")
    admin_after = serializers.CharField(help_text="Its admin state after.")
    changes = serializers.BooleanField(help_text="false: it already is so and is left alone.")
    units = serializers.IntegerField(help_text="Its GPUs (MIG slices count one each).")
    leases = serializers.IntegerField(help_text="Leases holding GPUs on it.")


class HostBulkAnswerSerializer(serializers.Serializer[Any]):
    dry_run = serializers.BooleanField(help_text="true: a preview; nothing was changed.")
    action = serializers.CharField(source="verb", help_text="cordon, drain or uncordon.")
    hosts = HostChangeSerializer(many=True, help_text="Every host asked for, in name order.")
    changed = serializers.ListField(child=serializers.CharField(), help_text=(
        "Names of the hosts changed (empty on a dry run)."))
    pools = PoolChangeSerializer(many=True, help_text="GPUs in service (free or leased) per pool, before and "
                                                      "after, against the guarantees given in it.")
    leases = LeaseImpactSerializer(many=True, help_text="Every lease concerned, with its outcome.")
    guarantees_ok = serializers.BooleanField(help_text="Whether every pool's guarantees still fit after.")
    notes = serializers.ListField(child=serializers.CharField(), help_text="What else to know, in words.")
    fingerprint = serializers.CharField(help_text="Names what the preview says; give it to the confirm.")


def bulk_answer(preview: BulkPreview, *, dry_run: bool, changed: tuple[str, ...] = ()) -> dict[str, Any]:
    data = {"verb": preview.verb, "hosts": preview.hosts, "pools": preview.pools, "leases": preview.leases,
            "guarantees_ok": preview.guarantees_ok, "notes": preview.notes, "fingerprint": preview.fingerprint,
            "dry_run": dry_run, "changed": list(changed)}
    return dict(HostBulkAnswerSerializer(data).data)


def bulk_call(data: dict[str, Any], actor: str) -> dict[str, Any]:
    """The preview (`dry_run`) or the change (checked against `fingerprint` when given) and what it did."""
    if data["dry_run"]:
        return bulk_answer(hosts_bulk_preview(host_ids=data["host_ids"], verb=data["action"]), dry_run=True)
    result = hosts_bulk_action(host_ids=data["host_ids"], verb=data["action"], actor=actor,
                               fingerprint=data["fingerprint"])
    return bulk_answer(result.preview, dry_run=False, changed=result.changed)
