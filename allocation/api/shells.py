"""`leases/{id}/ssh-keys/`: the keys users log in to a lease's host with (`gpupool ssh`), their
serializers and documentation. The work is allocation.services.shells."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from allocation.models import LeaseShellKey
from allocation.selectors import as_lease_id, lease_list
from allocation.services.shells import ShellGrant, lease_shell_key_add, lease_shell_key_remove
from core.api.schema import ErrorSerializer
from core.errors import NotFound


class ShellKeyCreateSerializer(serializers.Serializer[Any]):
    public_key = serializers.CharField(max_length=16384, trim_whitespace=True,
                                       help_text="An OpenSSH public key line (`ssh-ed25519 AAAA… comment`; the comment "
                                                 "is dropped). Make a key pair for this login and keep its private "
                                                 "half to yourself.")


class ShellKeySerializer(serializers.ModelSerializer[LeaseShellKey]):
    lease = serializers.UUIDField(source="lease_id", read_only=True, help_text="The lease the key logs in to.")
    user: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True, help_text="Who added it.")

    class Meta:
        model = LeaseShellKey
        fields = ["id", "lease", "user", "key_type", "fingerprint", "created_at", "removed_at"]
        extra_kwargs = {"id": {"help_text": "The key's id on this lease (`DELETE ssh-keys/{key}/`)."},
                        "key_type": {"help_text": "`ssh-ed25519`, `ecdsa-sha2-nistp256`, `ssh-rsa`…"},
                        "created_at": {"help_text": "When it was added."},
                        "removed_at": {"help_text": "When it was taken back (null: it logs in for the lease's life)."}}


class LoginSerializer(serializers.Serializer[Any]):
    address = serializers.CharField(help_text="The host's address, as the ssh source's config names it.")
    port = serializers.IntegerField(help_text="Its SSH port.")
    user = serializers.CharField(help_text="The account to log in as.")
    host_key = serializers.CharField(help_text="The host's pinned key (`ssh-ed25519 AAAA…`); trust no other.")
    known_hosts = serializers.CharField(help_text="The host key as a line of an OpenSSH known_hosts file.")


class ShellGrantSerializer(ShellKeySerializer):
    login = serializers.SerializerMethodField(help_text="Where to log in with the key.")

    class Meta(ShellKeySerializer.Meta):
        fields = [*ShellKeySerializer.Meta.fields, "login"]

    @extend_schema_field(LoginSerializer)
    def get_login(self, key: LeaseShellKey) -> dict[str, Any]:
        login = self.context["login"]
        where = login.address if login.port == 22 else f"[{login.address}]:{login.port}"
        return {"address": login.address, "port": login.port, "user": login.user, "host_key": login.host_key,
                "known_hosts": f"{where} {login.host_key}" if login.host_key else ""}


_ERRORS = {
    (400, "application/json"): OpenApiResponse(ErrorSerializer, description="Not an OpenSSH public key (`invalid`)."),
    (409, "application/json"): OpenApiResponse(ErrorSerializer, description=(
        "`no_shell`: the lease has no binding (request it with `{\"kind\": \"session\"}`) or is not on an ssh "
        "source; `workload_not_started`: not bound yet; `lease_ended`; `too_many_shell_keys` (16 at once).")),
    (502, "application/json"): OpenApiResponse(ErrorSerializer, description=(
        "The lease's host could not be reached (`shell_unavailable`); retry.")),
}
ADD_DOC = extend_schema(
    methods=["POST"], summary="Let a key log in to a lease's host", request=ShellKeyCreateSerializer,
    responses={201: ShellGrantSerializer, **_ERRORS},
    description="For a bound lease of an ssh source (a `process`, or a `session` that starts nothing): the key may "
                "log in to the lease's host as the source's user, into a shell (or `ssh host CMD`) with "
                "CUDA_VISIBLE_DEVICES set to the lease's GPUs, until the lease ends: then the key is taken out and "
                "every shell it opened is ended (TERM, the lease's grace, KILL) before its GPUs are given to "
                "anyone else. Team-scoped like the lease (another team's lease is a 404).")
LIST_DOC = extend_schema(methods=["GET"], summary="The keys of a lease", request=None,
                         responses=ShellKeySerializer(many=True), filters=False)
REMOVE_DOC = extend_schema(
    summary="Take a key back", request=None, responses={204: None, 502: _ERRORS[(502, "application/json")]},
    description="Its open shells go on until the lease ends; `gpupool ssh` takes its key back when it exits.")


def keys_answer(request: Request, lease_id: Any) -> Response:
    """GET: the lease's keys; POST: add one (201)."""
    if request.method == "POST":
        body = ShellKeyCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        grant: ShellGrant = lease_shell_key_add(user=request.user, lease_id=lease_id,
                                                public_key=body.validated_data["public_key"])
        data = ShellGrantSerializer(grant.key, context={"login": grant.login}).data
        return Response(data, status=status.HTTP_201_CREATED)
    key = as_lease_id(lease_id)
    lease = lease_list(user=request.user, related=False).filter(pk=key).first() if key else None
    if lease is None:
        raise NotFound("No Lease matches the given query.")
    return Response(ShellKeySerializer(lease.shell_keys.select_related("user"), many=True).data)


def remove_answer(request: Request, lease_id: Any, key: Any) -> Response:
    lease_shell_key_remove(user=request.user, lease_id=lease_id, key=key)
    return Response(status=status.HTTP_204_NO_CONTENT)
