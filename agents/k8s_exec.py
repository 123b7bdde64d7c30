"""A command in a pod workload's container, through the API server's `exec` subresource (as
`kubectl exec`): the official client's websocket stream (`kubernetes.stream`), binary, on the
channel protocol v5.channel.k8s.io (v4 where the server offers no more: then stdin cannot be
closed apart from the session).

Each exec has an API client of its own: `kubernetes.stream.stream` swaps its ApiClient's
`call_api` for the length of the call, which another thread's request on a shared client would
go through (discovery, a bind).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agents.base import AgentError
from agents.k8s_api import KubeApi, Refused
from agents.shells import STDERR, STDOUT, ExecSession, PodExec

if TYPE_CHECKING:
    from agents.k8s_api import Retrying

STATUS_CHANNEL, RESIZE_CHANNEL, STDIN_CHANNEL = 3, 4, 0


class PodExecSession(ExecSession):
    def __init__(self, client: Any, api: KubeApi) -> None:
        self._ws, self._api = client, api
        self._lock = threading.Lock()

    def read(self, timeout: float) -> list[tuple[int, bytes]]:
        if self.ended:
            return []
        try:
            self._ws.update(timeout=timeout)
        except Exception as exc:  # the connection broke (or close() pulled it from under us)
            self._finish(None, f"the exec stream broke: {exc}")
            return []
        out = [(channel, data) for channel in (STDOUT, STDERR) if (data := self._ws.read_channel(channel))]
        if not self._ws.is_open():
            self._finish(*exit_status(self._ws.read_channel(STATUS_CHANNEL)))
        return out

    def _finish(self, code: int | None, message: str) -> None:
        if not self.ended:
            self.ended, self.exit_code, self.message = True, code, message
            self.close()

    def write(self, data: bytes) -> None:
        with self._lock:
            if not self.ended and data:
                self._ws.write_stdin(data)

    def close_stdin(self) -> None:
        with self._lock:
            if not self.ended:
                self._ws.close_channel(STDIN_CHANNEL)

    def resize(self, width: int, height: int) -> None:
        with self._lock:
            if not self.ended:
                self._ws.write_channel(RESIZE_CHANNEL, json.dumps({"Width": width, "Height": height}).encode())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ws.close()
        self._api.close()


def exit_status(raw: Any) -> tuple[int | None, str]:
    """(exit code, words) of the status the API server sends on channel 3 as the command ends:
    `Success` is 0; a `NonZeroExitCode` failure carries the code in its causes."""
    try:
        status = json.loads(raw or b"{}")
    except ValueError:
        status = {}
    if not isinstance(status, dict) or not status:
        return None, "the exec stream ended without the command's exit status"
    if status.get("status") == "Success":
        return 0, ""
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            with contextlib.suppress(TypeError, ValueError):
                return int(cause.get("message")), str(status.get("message") or "")
    return None, str(status.get("message") or "the command failed")


class KubernetesExec(PodExec):
    """`PodExec` for `KubernetesConnector` (it provides the attributes declared below)."""

    if TYPE_CHECKING:
        config: Mapping[str, Any]
        retrying: Retrying
        connect_timeout_s: float

    def exec(self, handle: Mapping[str, Any], command: Sequence[str], *, tty: bool, stdin: bool) -> ExecSession:
        namespace, name = str(handle.get("namespace") or ""), str(handle.get("name") or "")
        if not namespace or not name:
            raise AgentError(f"not a pod handle: {dict(handle)!r}", permanent=True)
        api = KubeApi(self.config, self.retrying)
        try:
            container = _running_container(api, namespace, name)
            client = _open(api, namespace, name, container, command, tty=tty, stdin=stdin,
                           timeout=self.connect_timeout_s)
        except BaseException:
            api.close()
            raise
        return PodExecSession(client, api)


def _running_container(api: KubeApi, namespace: str, name: str) -> str:
    where = f"{namespace}/{name}"
    try:
        pod = api.call(f"cannot read pod {where}", "read_namespaced_pod", name, namespace)
    except Refused as exc:
        raise AgentError(f"pod {where} no longer exists ({exc.message})", permanent=True) from None
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    if phase != "Running":
        raise AgentError(f"pod {where} is {phase}, not running: nothing to exec into", permanent=True)
    return str((((pod.get("spec") or {}).get("containers") or [{}])[0]).get("name") or "")


def _open(api: KubeApi, namespace: str, name: str, container: str, command: Sequence[str], *, tty: bool,
          stdin: bool, timeout: float) -> Any:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.stream import stream

    core = api.api_for("connect_get_namespaced_pod_exec")
    try:
        return stream(core.connect_get_namespaced_pod_exec, name, namespace, command=list(command),
                      container=container or None, stdin=stdin, stdout=True, stderr=not tty, tty=tty,
                      _preload_content=False, binary=True, _request_timeout=timeout)
    except ApiException as exc:  # the handshake failed; the status is in the words
        reason = str(exc.reason or exc)
        gone = any(f"{status} " in reason for status in ("400", "403", "404"))
        raise AgentError(f"cannot exec in pod {namespace}/{name}: {reason}", permanent=gone) from None
