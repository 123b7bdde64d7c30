"""`GET /api/v1/leases/{id}/exec/?command=…` upgraded to a websocket: a command in a pod lease's
container, through the server (`kubectl exec` without a kubeconfig). Its parameters and its
documentation; the ASGI front serves it (allocation/watch/exec.py).

The websocket speaks subprotocol `v1.exec.gpupool.io`: binary messages whose first byte is the
channel, as Kubernetes' own exec protocol (v5.channel.k8s.io) has them. From the client: 0 stdin,
4 the terminal's size (`{"width": W, "height": H}`), 255 followed by 0: stdin ended. From the
server: 1 stdout, 2 stderr (with `tty` both come on 1, as a terminal has them), then 3 once, the
end: `{"exit_code": N, "message": "…"}` (`exit_code` null when it could not be told), and the
server closes (1000). A client that closes ends the command (a hangup). Errors before the
upgrade are the API's JSON error body with its status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers

from allocation.workloads.exec import WorkloadExec, exec_target
from core.api.schema import ErrorSerializer
from core.errors import DomainError

PROTOCOL = "v1.exec.gpupool.io"


class UpgradeRequired(DomainError):
    status = 426
    code = "upgrade_required"


class ExecQuerySerializer(serializers.Serializer[Any]):
    command = serializers.ListField(child=serializers.CharField(max_length=8192, trim_whitespace=False),
                                    min_length=1, max_length=256,
                                    help_text="The command's argv, one `command=` per word (as Kubernetes has it).")
    tty = serializers.BooleanField(required=False, default=False,
                                   help_text="Run it on a terminal (`gpupool exec -t`): stdout and stderr as one.")
    stdin = serializers.BooleanField(required=False, default=False,
                                     help_text="Pass the client's input on (`gpupool exec -i`).")


def exec_request(user: Any, lease_id: Any, query: Mapping[str, Any]) -> WorkloadExec:
    """Validate the parameters (400 `invalid`) and find the lease's workload (404, 409; see
    `exec_target`)."""
    params = ExecQuerySerializer(data=query)
    params.is_valid(raise_exception=True)
    data = params.validated_data
    return exec_target(user=user, lease_id=lease_id, command=data["command"], tty=data["tty"], stdin=data["stdin"])


_ERRORS = {
    409: "`no_workload` (no binding), `no_exec` (a VM lease: `gpupool ssh`), `workload_not_started`, "
         "`workload_not_running` (the pod is gone or not running), `lease_ended`.",
    426: "Not a websocket upgrade, or a server without the ASGI front (`upgrade_required`).",
    429: "You have too many streams open on this server (`too_many_log_streams`: exec sessions count with logs).",
    502: "The pod's API server could not be reached (`exec_unavailable`); retry.",
    503: "This server serves its most streams at once (`log_streams_busy`); retry after Retry-After.",
}
DOCUMENTED = extend_schema(
    summary="Run a command in a pod lease's container (websocket)",
    description=(__doc__ or "").split("\n\n", 1)[1].strip() + "\n\nTeam-scoped like the lease: another team's "
                "lease is a 404. Each exec is an audit event (`lease.exec`) naming who ran what.",
    request=None, filters=False, parameters=[ExecQuerySerializer],
    responses={(101, "application/octet-stream"): OpenApiResponse(description=f"Switching to a websocket "
                                                                               f"(subprotocol `{PROTOCOL}`)."),
               **{(code, "application/json"): OpenApiResponse(response=ErrorSerializer, description=text)
                  for code, text in _ERRORS.items()}},
)


def plain_http_answer(user: Any, lease_id: Any, query: Mapping[str, Any]) -> NoReturn:
    """What Django answers (a plain GET, or a WSGI-only server): the same checks, then 426."""
    exec_request(user, lease_id, query)
    raise UpgradeRequired("connect with a websocket (subprotocol v1.exec.gpupool.io); the ASGI front "
                          "(pool.asgi:application) serves it")
