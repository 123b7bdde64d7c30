"""The Kubernetes source: GPU nodes of one cluster, and leases bound as pods on them.

Config keys (see CONTRACT.md; checked in `agents.k8s_config`): `kubeconfig` (path) or `in_cluster: true`, `context`,
`namespace` (where bound pods go, default `gpupool-jobs`), `host` (API URL override, used by
tests), `request_timeout` (s, default 10), `pending_deadline_s` (default 300), `telemetry`
(DCGM metrics from Prometheus: `agents.k8s_telemetry`), `device_binding` (`auto`, `dra` or
`device_plugin`: how a pod gets its leased GPUs; see `agents.k8s_dra_api`).

The API server is reached through `agents.k8s_api.KubeApi`, whose calls are bounded and retried
by the base Connector's timeouts and budget; nodes become facts in `agents.k8s_nodes`, and the
lease's Pod is built in `agents.k8s_pod_manifest` and read back in `agents.k8s_pod_status`.
On nodes whose GPUs an NVIDIA DRA driver publishes (`agents.k8s_dra`), a pod gets exactly the
leased devices through a ResourceClaim (`agents.k8s_claim`) instead of a count of them.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

from agents.base import (
    BIND_ENDED,
    BIND_GONE,
    HOST_OFFLINE,
    AgentError,
    BindingStatus,
    BindRequest,
    Connector,
    Discovery,
    HostFact,
    LogStream,
)
from agents.k8s_api import KubeApi, Refused
from agents.k8s_claim import build_claim, pod_claim, validate_claim
from agents.k8s_config import CONFIG_KEYS, DEFAULT_NAMESPACE, DEFAULT_PENDING_DEADLINE_S, config_errors, is_dns_label
from agents.k8s_dra import BINDING_AUTO, is_dra_uuid, with_dra
from agents.k8s_dra_api import DraCalls
from agents.k8s_exec import KubernetesExec
from agents.k8s_logs import PodLog
from agents.k8s_nodes import node_to_host
from agents.k8s_pod_manifest import build_pod, labelled_for, pod_name, validate_pod
from agents.k8s_pod_status import events_text, pod_status
from agents.k8s_resources import is_active_pod
from agents.k8s_telemetry import SECRET_FIELDS as TELEMETRY_SECRETS
from agents.k8s_telemetry import Telemetry

# Pods that still hold resources and sit on a node. Test servers may ignore field selectors,
# so discovery filters the same way client-side.
_ACTIVE_SCHEDULED_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
_GONE_REASON = "pod deleted by someone else"


class KubernetesConnector(KubernetesExec, Connector):
    """GPU nodes of one Kubernetes cluster; `bind` runs a lease's Pod on the leased node; `exec`
    runs a command in it (agents.k8s_exec)."""

    kind = "kubernetes"
    workloads: ClassVar[frozenset[str]] = frozenset({"pod"})
    spans_sources: ClassVar[bool] = False  # a multi-host lease stays in one cluster
    #: Chunk size of list calls: big clusters come in pages instead of one huge answer.
    list_page_size: int = 500
    config_keys = CONFIG_KEYS
    secret_fields = TELEMETRY_SECRETS

    def __init__(self, name: str, config: Mapping[str, Any]) -> None:
        super().__init__(name, config)
        self.namespace = str(config.get("namespace") or DEFAULT_NAMESPACE)
        self.pending_deadline_s = float(
            config.get("pending_deadline_s", DEFAULT_PENDING_DEADLINE_S)
        )
        # `self.retrying` reads the retry settings at each call, so a test may shrink them later.
        self.api = KubeApi(config, self.retrying)
        # Two budgets for the telemetry read: it is nine queries, each retried within one.
        self.telemetry = Telemetry.from_config(config, self.retrying, budget_s=lambda: 2 * self.retry_budget_s)
        self.dra = DraCalls(self.api, self._list, str(config.get("device_binding") or BINDING_AUTO))

    # --- configuration ----------------------------------------------------------------------------

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> list[str]:
        """Human sentences for everything wrong with an entry (`agents.k8s_config`)."""
        return config_errors(config)

    def close(self) -> None:
        """Drop the HTTP connection pool. The connector builds a new one if used again."""
        self.api.close()

    def _list(self, what: str, method: str, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return self.api.list(what, method, *args, page_size=self.list_page_size, **kwargs)

    # --- discovery ----------------------------------------------------------------------------

    def discover(self) -> Discovery:
        """List nodes and the active pods on them; one HostFact per GPU node.

        Nodes without GPUs (and without GPU labels) are skipped. The whole source failing
        (unreachable, forbidden) comes back as `Discovery.error`; it never raises.
        """
        try:
            nodes = self._list(f"cannot list nodes from {self.api.where}", "list_node")
            pods = self._list(
                f"cannot list pods from {self.api.where}",
                "list_pod_for_all_namespaces",
                field_selector=_ACTIVE_SCHEDULED_PODS,
            )
            dra = self.dra.inventory()
        except AgentError as exc:
            return Discovery(error=exc.message)

        pods_by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name and is_active_pod(pod):
                pods_by_node[node_name].append(pod)

        hosts = []
        for node in nodes:
            name = str((node.get("metadata") or {}).get("name") or "")
            try:
                host = node_to_host(node, pods_by_node.get(name, []), self.name)
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                # One malformed node must not hide the rest of the cluster.
                host = HostFact(name=name, state=HOST_OFFLINE, error=f"cannot read node: {exc}")
            host = with_dra(host, dra, self.dra.mode)
            if host.gpus or host.error:
                hosts.append(host)
        if self.telemetry is not None:  # DCGM metrics; a failure to read them never fails discovery
            return self.telemetry.discovery(hosts, pods)
        return Discovery(hosts=tuple(hosts))

    # --- binding ------------------------------------------------------------------------------

    def bind(self, request: BindRequest) -> BindingStatus:
        """Create the lease's pod on its node; idempotent.

        A second call for the same lease (a retried task) meets the first pod (409) and adopts
        it when it carries this lease's label; a pod of the same name that is not ours is a
        permanent error. The handle is `{namespace, name, node, uid, created_at}`.

        GPUs read from ResourceSlices (real uuids) are bound device-exact: the pod refers to a
        ResourceClaim naming exactly them (handle key `claim`), created once the pod exists so
        that the pod owns it; if the claim cannot be made, the pod is deleted again. Others are
        bound count-exact, as `nvidia.com/gpu` (or MIG) limits the device plugin fills.
        """
        spec = request.spec
        if spec.get("kind") != "pod":
            raise AgentError(
                f"a kubernetes source binds pods, not {spec.get('kind')!r}", permanent=True
            )
        namespace = str(spec.get("namespace") or self.namespace)
        if not is_dns_label(namespace):
            raise AgentError(f"{namespace!r} is not a valid namespace name", permanent=True)
        # A requeued lease's pod and claim are named apart from its first ones (`binding_id`),
        # which may still exist on the lost node until they are deleted; the lease label stays
        # the lease id.
        claim = pod_claim(request.binding_id, request.gpu_uuids) if _by_claim(request.gpu_uuids) else None
        owner = f"gpupool source {self.name}"
        built = build_pod(
            lease_id=request.lease_id,
            host_name=request.host_name,
            gpu_uuids=request.gpu_uuids,
            manifest=spec.get("pod"),
            namespace=namespace,
            owner=owner,
            uuid_scope=self.name,
            claim=claim,
        )
        built["metadata"]["name"] = pod_name(request.binding_id)
        pod = validate_pod(built)
        if claim is not None:  # a claim the schema refuses must refuse the bind before any create
            validate_claim(_claim_for(request, namespace, owner))
        name = pod["metadata"]["name"]
        created = self._create_or_adopt(namespace, pod, request.lease_id)
        handle = {
            "namespace": namespace,
            "name": name,
            "node": request.host_name,
            "uid": (created.get("metadata") or {}).get("uid", ""),
            "created_at": datetime.now(UTC).isoformat(),
        }
        if claim is not None:
            self._claim_devices(namespace, request, owner, created)
            handle["claim"] = claim.name
        return self._status(created, handle)

    def _claim_devices(self, namespace: str, request: BindRequest, owner: str, pod: dict[str, Any]) -> None:
        """Create (or adopt) the lease's ResourceClaim, owned by its pod. If that fails, the pod
        is deleted (and the claim, in case its create happened after all), so that a failed
        bind leaves nothing behind; a retried bind creates both afresh."""
        claim = validate_claim(_claim_for(request, namespace, owner, pod))
        try:
            self.dra.create_or_adopt_claim(namespace, claim, request.lease_id)
        except AgentError:
            # Best effort: the bind's own error is the one to report.
            with contextlib.suppress(AgentError):
                self.unbind({"namespace": namespace, "name": pod["metadata"]["name"]}, grace_s=0)
            with contextlib.suppress(AgentError):
                self.dra.delete_claim_if_ours(namespace, claim["metadata"]["name"], request.lease_id)
            raise

    def _create_or_adopt(
        self, namespace: str, pod: dict[str, Any], lease_id: str
    ) -> dict[str, Any]:
        # 409: the name is taken. Ours from an earlier try (the label says so) or someone else's.
        return self.api.create_or_adopt(
            "pod", namespace, pod, create="create_namespaced_pod", read="read_namespaced_pod",
            ours=lambda existing: labelled_for(existing, lease_id), owner=f"lease {lease_id}",
        )  # fmt: skip

    def observe(self, handle: Mapping[str, Any]) -> BindingStatus:
        """Read the pod and map its phase: Pending → starting (failed once it has been
        Pending longer than `pending_deadline_s`, with its events as the reason), Running →
        running, Succeeded → succeeded, Failed → failed with the container's exit code,
        404 → gone. A workload that ended gives its ResourceClaim back at once (the lease ends
        without an unbind; the pod stays for inspection)."""
        namespace, name = _handle_parts(handle)
        try:
            pod = self.api.call(
                f"cannot read pod {namespace}/{name}", "read_namespaced_pod", name, namespace
            )
        except Refused as exc:
            if exc.status != 404:
                raise AgentError(
                    f"cannot read {namespace}/{name}: {exc.message}", permanent=True
                ) from None
            status = BindingStatus(state=BIND_GONE, handle=handle, reason=_GONE_REASON)
        else:
            status = self._status(pod, handle)
        if status.state in BIND_ENDED and handle.get("claim"):
            with contextlib.suppress(AgentError):  # the pod owns it: deleting the pod removes it too
                self.dra.delete_claim(namespace, str(handle["claim"]))
        return status

    def logs(self, handle: Mapping[str, Any], *, tail: int | None, follow: bool) -> LogStream:
        """The pod's log through the API server (agents.k8s_logs), its first container's."""
        stream = PodLog(self.api, *_handle_parts(handle), tail=tail, follow=follow,
                        read_timeout=self.request_timeout_s, pending_wait_s=self.pending_deadline_s)
        stream.open()
        return stream

    def bind_handle(self, request: BindRequest) -> Mapping[str, Any] | None:
        """The lease's pod (and claim) by name, which is deterministic: `unbind` deletes them if
        they are there and carry this lease's label. None for a spec this source never creates."""
        if request.spec.get("kind") != "pod":
            return None
        namespace = str(request.spec.get("namespace") or self.namespace)
        if not is_dns_label(namespace):
            return None
        handle = {"namespace": namespace, "name": pod_name(request.binding_id), "node": request.host_name,
                  "uid": "", "lease_id": request.lease_id}
        try:
            by_claim = bool(request.gpu_uuids) and _by_claim(request.gpu_uuids)
        except AgentError:
            by_claim = False  # a lease of mixed GPUs is refused before any create
        return {**handle, "claim": pod_claim(request.binding_id, request.gpu_uuids).name} if by_claim else handle

    def unbind(self, handle: Mapping[str, Any], *, grace_s: int) -> None:
        """Delete the pod, giving its containers `grace_s` seconds after SIGTERM, and its
        ResourceClaim if it has one. What is already gone counts as done, so calling this twice
        is fine.

        Only our pod is deleted: the handle's uid is a precondition of the delete (a pod of the
        same name made since, by a later binding or by someone else, is left alone: 409, and so
        is its claim). A handle without uid (`bind_handle`) reads the pod first and deletes it,
        and the claim, only when they carry the lease's label."""
        namespace, name = _handle_parts(handle)
        uid = str(handle.get("uid") or "")
        lease_id = str(handle.get("lease_id") or "") if not uid else ""
        if lease_id:
            uid = self._our_pod_uid(namespace, name, lease_id)
        replaced = False
        if uid or not lease_id:
            replaced = self._delete_pod(namespace, name, uid, grace_s)
        claim = str(handle.get("claim") or "")
        if claim and lease_id:
            self.dra.delete_claim_if_ours(namespace, claim, lease_id)
        elif claim and not replaced:  # the pod owns it, but a cluster's garbage collector may lag
            self.dra.delete_claim(namespace, claim)

    def _delete_pod(self, namespace: str, name: str, uid: str, grace_s: int) -> bool:
        """Delete the pod (only with this uid, when given); True when the name now belongs to
        another pod (409 on the uid: ours is gone already)."""
        grace = max(0, int(grace_s))
        # The API server reads a delete's options from its body when it has one, ignoring the
        # query: the grace goes in both.
        options = {"gracePeriodSeconds": grace, "preconditions": {"uid": uid}} if uid else None
        try:
            self.api.call(
                f"cannot delete pod {namespace}/{name}",
                "delete_namespaced_pod",
                name,
                namespace,
                grace_period_seconds=grace,
                body=options,
            )
        except Refused as exc:
            if exc.status == 409:
                return True
            if exc.status != 404:
                what = f"cannot delete {namespace}/{name}"
                raise AgentError(f"{what}: {exc.message}", permanent=True) from None
        return False

    def _our_pod_uid(self, namespace: str, name: str, lease_id: str) -> str:
        """The uid of pod `name` if it is the lease's (its label says so); "" when there is none."""
        try:
            pod = self.api.call(f"cannot read pod {namespace}/{name}", "read_namespaced_pod", name, namespace)
        except Refused as exc:
            if exc.status == 404:
                return ""
            raise AgentError(f"cannot read {namespace}/{name}: {exc.message}", permanent=True) from None
        return str((pod.get("metadata") or {}).get("uid") or "") if labelled_for(pod, lease_id) else ""

    # --- status mapping -----------------------------------------------------------------------

    def _status(self, pod: Mapping[str, Any], handle: Mapping[str, Any]) -> BindingStatus:
        def events() -> str:
            namespace, name = _handle_parts(handle)
            return self._events_text(namespace, name)

        return pod_status(pod, handle, pending_deadline_s=self.pending_deadline_s, events=events)

    def _events_text(self, namespace: str, name: str) -> str:
        """The pod's latest events in words; "" when there are none or they cannot be read
        (the deadline verdict must not fail because events are unavailable)."""
        try:
            events = self._list(
                f"cannot list events of pod {namespace}/{name}",
                "list_namespaced_event",
                namespace,
                field_selector=f"involvedObject.name={name}",
            )
        except (AgentError, Refused):
            return ""
        return events_text(events, name)


# --- helpers --------------------------------------------------------------------------------------


def _handle_parts(handle: Mapping[str, Any]) -> tuple[str, str]:
    namespace, name = handle.get("namespace"), handle.get("name")
    if not namespace or not name:
        raise AgentError(
            f"binding handle without namespace and name: {dict(handle)}", permanent=True
        )
    return str(namespace), str(name)


def _claim_for(request: BindRequest, namespace: str, owner: str,
               pod: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The lease's ResourceClaim, named after its binding (as its pod is) and labelled for the lease."""
    claim = build_claim(lease_id=request.lease_id, gpu_uuids=request.gpu_uuids, namespace=namespace,
                        owner=owner, pod=pod)
    claim["metadata"]["name"] = pod_claim(request.binding_id, request.gpu_uuids).name
    return claim


def _by_claim(gpu_uuids: tuple[str, ...]) -> bool:
    """True when the lease's GPUs were read from ResourceSlices: they are bound by a claim."""
    from_slices = {is_dra_uuid(uuid) for uuid in gpu_uuids}
    if len(from_slices) > 1:
        raise AgentError("the lease holds GPUs of ResourceSlices and of the device plugin at once: "
                         "a pod gets its GPUs one way or the other", permanent=True)  # fmt: skip
    return from_slices == {True}

