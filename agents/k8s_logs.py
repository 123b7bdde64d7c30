"""A pod workload's log, through the API server's pod `log` subresource (`kubectl logs`).

The pod is read first: one that no longer exists is a permanent error before anything is sent.
The log is its first container's (the user's main container: gpupool adds none). While the pod
is Pending there is no log yet: a follow waits for it to start (looking twice a second, at most
the source's `pending_deadline_s`), a plain read answers nothing. The body is read as it comes
(`read1`: one chunk of the chunked answer at a time), so a followed line is passed on when the
API server sends it; the server ends a follow when the container ends.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from agents.base import AgentError, LogStream
from agents.k8s_api import KubeApi, Refused

PENDING_LOOK_S = 0.5
#: A follow's reads wait this long for the next bytes: a workload may be quiet for hours, and the
#: client takes no "no limit". Only a connection that died silently waits it out: closing the
#: stream ends a waiting read at once (`interrupt`).
FOLLOW_READ_TIMEOUT_S = 24 * 3600.0


class PodLog(LogStream):
    def __init__(self, api: KubeApi, namespace: str, name: str, *, tail: int | None, follow: bool,
                 read_timeout: float, pending_wait_s: float) -> None:
        super().__init__()
        self.api, self.namespace, self.name = api, namespace, name
        self.tail, self.follow = tail, follow
        self.read_timeout, self.pending_wait_s = read_timeout, pending_wait_s
        self.container = ""
        self.phase = ""
        self._response: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def open(self) -> None:
        """Read the pod: its first container's name and its phase. Raises a permanent AgentError
        when the pod is gone."""
        pod = self._read_pod()
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        self.container = str(containers[0].get("name") or "")

    def _read_pod(self) -> dict[str, Any]:
        where = f"{self.namespace}/{self.name}"
        try:
            pod = self.api.call(f"cannot read pod {where}", "read_namespaced_pod", self.name, self.namespace)
        except Refused as exc:
            if exc.status == 404:
                raise AgentError(f"pod {where} no longer exists: its log is gone", permanent=True) from None
            raise AgentError(f"cannot read pod {where}: {exc.message}", permanent=True) from None
        self.phase = str((pod.get("status") or {}).get("phase") or "Pending")
        return pod

    def _wait_until_started(self) -> bool:
        """False when the pod is still Pending at the end of the wait (or the stream closed)."""
        deadline = time.monotonic() + self.pending_wait_s
        while self.phase == "Pending":
            if time.monotonic() >= deadline or self._stop.wait(PENDING_LOOK_S):
                return False
            self._read_pod()
        return True

    def chunks(self) -> Iterator[bytes]:
        if self.phase == "Pending" and not (self.follow and self._wait_until_started()):
            return  # nothing written yet
        response = self._open_log()
        if response is None:
            return
        try:
            while not self.closed:
                data = response.read1(65536)
                if not data:
                    break
                yield data
        except Exception as exc:
            if self.closed:
                return
            raise AgentError(f"reading the log of pod {self.namespace}/{self.name} failed: {exc}") from None
        finally:
            self._release()
        self.workload_ended = self.follow and not self.closed

    def _open_log(self) -> Any:
        """The log request's answer, or None when the pod has no log to give (a container that
        never started: the API server answers 400)."""
        kwargs: dict[str, Any] = {"follow": self.follow}
        if self.container:
            kwargs["container"] = self.container
        if self.tail is not None:
            kwargs["tail_lines"] = self.tail
        where = f"{self.namespace}/{self.name}"
        try:
            response = self.api.open_stream(f"cannot read the log of pod {where}", "read_namespaced_pod_log",
                                            self.name, self.namespace,
                                            read_timeout=FOLLOW_READ_TIMEOUT_S if self.follow else self.read_timeout,
                                            **kwargs)
        except Refused as exc:
            raise AgentError(f"pod {where} no longer exists: {exc.message}", permanent=True) from None
        except AgentError as exc:
            if exc.permanent and "HTTP 400" in exc.message:
                return None
            raise
        with self._lock:
            if self.closed:
                _drop(response)
                return None
            self._response = response
        return response

    def _release(self) -> None:
        with self._lock:
            response, self._response = self._response, None
        if response is not None:
            _drop(response)

    def interrupt(self) -> None:
        self._stop.set()
        with self._lock:
            response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # a blocked read1 returns (or raises) at once
                response.shutdown()


def _drop(response: Any) -> None:
    """Close the answer and its connection (a half-read body must never go back to the pool)."""
    with contextlib.suppress(Exception):
        response.close()
        response.release_conn()
