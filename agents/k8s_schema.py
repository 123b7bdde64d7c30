"""Every object gpupool creates on Kubernetes is checked against the real OpenAPI schema first.

`kubernetes-validate` ships the schemas of Kubernetes 1.25 to 1.37; we check against one that has
Dynamic Resource Allocation GA (`resource.k8s.io/v1`, 1.34+), strictly: unknown fields are errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agents.base import AgentError

#: The schema version objects are checked against (kubernetes-validate ships 1.25 to 1.37).
KUBERNETES_SCHEMA_VERSION = "1.37.0"
#: DRA objects (and pods that use them) are checked against the first release with DRA GA as
#: well, so that what we create works on every cluster that can take it.
DRA_SCHEMA_VERSIONS = ("1.34.0", KUBERNETES_SCHEMA_VERSION)


def validate_object(
    obj: Mapping[str, Any], what: str, versions: Sequence[str] = (KUBERNETES_SCHEMA_VERSION,)
) -> dict[str, Any]:
    """Check `obj` (a Pod, a ResourceClaim: its `apiVersion` and `kind` pick the schema) against
    the schema of each of `versions`.

    Returns the JSON-ready form (`ApiClient.sanitize_for_serialization`, which also turns any
    client model objects or datetimes into plain JSON). Raises AgentError(permanent=True) with
    the schema's message and the path of the offending field; `what` names the object in it
    ("the Pod manifest").
    """
    import kubernetes_validate
    from kubernetes.client import ApiClient

    with ApiClient() as api_client:
        data: dict[str, Any] = api_client.sanitize_for_serialization(dict(obj))
    try:
        for version in versions:
            kubernetes_validate.validate(data, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = json_path(exc.absolute_path)
        raise AgentError(
            f"{what} is invalid: {where}: {exc.message}" if where else f"{what} is invalid: {exc.message}",
            permanent=True,
        ) from None
    except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as exc:
        raise AgentError(f"cannot validate {what}: {exc.message}", permanent=True) from None
    return data


def json_path(path: Sequence[Any]) -> str:
    """`spec.containers[0].image` for the path parts ("spec", "containers", 0, "image")."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
