"""A lease's Pod as the API server reports it → the binding status, in words. Pure, no API calls."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from agents.base import (
    BIND_FAILED,
    BIND_RUNNING,
    BIND_STARTING,
    BIND_SUCCEEDED,
    BindingStatus,
)


def pod_status(
    pod: Mapping[str, Any],
    handle: Mapping[str, Any],
    *,
    pending_deadline_s: float,
    events: Callable[[], str],
    now: datetime | None = None,
) -> BindingStatus:
    """Map a pod (API JSON) to a binding status.

    Running → running; Succeeded → succeeded (exit 0); Failed → failed with the first bad
    container's exit code and the reasons; Unknown (node not reporting) → running, since the
    workload may well still run. Pending → starting, until it has been Pending longer than
    `pending_deadline_s` since its creationTimestamp (else the handle's `created_at`): then
    failed, with the waiting reasons and `events()` (called only then) as the reason.
    """
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase == "Running":
        return BindingStatus(state=BIND_RUNNING, handle=handle)
    if phase == "Succeeded":
        return BindingStatus(state=BIND_SUCCEEDED, handle=handle, exit_code=0)
    if phase == "Failed":
        exit_code, reason = pod_failure(status)
        return BindingStatus(state=BIND_FAILED, handle=handle, exit_code=exit_code, reason=reason)
    if phase == "Unknown":
        reason = "pod phase Unknown: its node is not reporting"
        return BindingStatus(state=BIND_RUNNING, handle=handle, reason=reason)
    waiting = pod_waiting_reasons(status)
    created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    created = created or parse_time(handle.get("created_at"))
    age = ((now or datetime.now(UTC)) - created).total_seconds() if created else 0.0
    if age <= pending_deadline_s:
        return BindingStatus(state=BIND_STARTING, handle=handle, reason=waiting)
    reason = f"pod stayed Pending for {int(age)} s (deadline {int(pending_deadline_s)} s)"
    details = "; ".join(filter(None, [waiting, events()])) or "no events recorded"
    return BindingStatus(state=BIND_FAILED, handle=handle, reason=f"{reason}: {details}")


def pod_failure(status: Mapping[str, Any]) -> tuple[int | None, str]:
    """Exit code and words for a Failed pod: the first container that ended badly, plus the
    pod-level reason (Evicted, OutOf<resource>, DeadlineExceeded) when there is one."""
    parts = []
    exit_code = None
    statuses = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    for container in statuses:
        terminated = (container.get("state") or {}).get("terminated") or {}
        code = terminated.get("exitCode")
        if code not in (None, 0):
            exit_code = int(code)
            text = f"container {container.get('name', '?')} exited with code {code}"
            if terminated.get("reason"):
                text += f" ({terminated['reason']})"
            if terminated.get("message"):
                text += f": {terminated['message']}"
            parts.append(text)
            break
    if status.get("reason") or status.get("message"):
        parts.append(": ".join(filter(None, [status.get("reason"), status.get("message")])))
    return exit_code, "; ".join(parts) or "pod failed"


def pod_waiting_reasons(status: Mapping[str, Any]) -> str:
    """Why containers have not started yet (ImagePullBackOff, …), in words."""
    texts = []
    statuses = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    for container in statuses:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] != "ContainerCreating":
            text = f"container {container.get('name', '?')} waiting: {waiting['reason']}"
            texts.append(f"{text} ({waiting['message']})" if waiting.get("message") else text)
    return "; ".join(texts)


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as an aware datetime; None when missing or unreadable."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def events_text(events: Sequence[Mapping[str, Any]], pod_name: str, *, last: int = 5) -> str:
    """The `last` most recent events about `pod_name`, in words ("" when none).

    Filters on `involvedObject.name` itself: not every server honours the field selector.
    """
    mine = [e for e in events if (e.get("involvedObject") or {}).get("name") == pod_name]
    mine.sort(key=_event_time)
    return "; ".join(
        f"{e.get('type', 'Normal')} {e.get('reason', '')}: {e.get('message', '')}".strip()
        for e in mine[-last:]
    )


def _event_time(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )
