"""Each lease change rendered once per web process, shared by every stream and long poll that sees it.

The feed (`allocation/watch/feed.py`) hands a change to every subscriber that wants it: each
subscriber's filter (team and pool visibility, `?team=`, `?pool=`, one lease) runs first, on the
change's ids alone, so a stream that may not see a change costs a comparison, never a read. The
first subscriber to need a change's JSON reads and renders it (two queries for a burst of changes,
on the feed's DB threads); every other one awaits the same result and sends the same bytes. So the
database and rendering cost of a change is one, whether 10 or 1,000 streams are open.

A change is rendered without a viewer: every subscriber that asks has already passed the
visibility check (`allocation.watch.access.Viewer.sees`), the same rule the API's lease list
applies. Its `state` is the one the change announced; the rest of the lease is as it was when the
first subscriber asked. A rendering is shared for FRESH_S only: every live subscriber asks within
milliseconds of the others, while a stream resumed later (its backlog) gets the lease as it is
then, as the API documents ("the rest of the lease JSON is the lease as it is when sent").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from allocation.events import LeaseChange
from allocation.watch.feed import in_db

KEEP = 20_000  # changes kept rendered at most
FRESH_S = 2.0  # how long a rendering is shared


@dataclass(frozen=True)
class Rendered:
    """One change's lease JSON (`body`, None when the lease no longer exists) and its SSE frame."""

    state: str
    body: bytes | None
    frame: bytes


def _render(changes: list[tuple[str, LeaseChange]]) -> list[Rendered]:
    """On a DB thread: the lease JSON of each change (two queries for them all), as the API renders it."""
    import uuid

    from allocation.api.lease_json import lease_dicts
    from core.api.renderers import JSONRenderer

    render = JSONRenderer().render
    leases = {str(data["id"]): data for data in lease_dicts(list(dict.fromkeys(c.lease_id for _, c in changes)))}
    out = []
    for event_id, change in changes:
        data = leases.get(str(uuid.UUID(change.lease_id)))
        body = render({**data, "state": change.state}) if data is not None else None
        frame = b"id: %s\nevent: lease\ndata: %s\n\n" % (event_id.encode(), body) if body is not None else b""
        out.append(Rendered(change.state, body, frame))
    return out


class SharedRenderer:
    """The process's rendered changes, by event id (the last KEEP of them)."""

    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._done: OrderedDict[str, tuple[float, asyncio.Future[Rendered]]] = OrderedDict()
        self.renders = 0  # changes rendered (for tests and benchmarks: one per change, not per stream)

    async def get(self, batch: Sequence[tuple[str, LeaseChange]]) -> list[Rendered]:
        """The rendering of each (event id, change) of `batch`, in order: those not yet rendered (or
        being rendered) in one read on the DB threads, the rest shared."""
        loop = asyncio.get_running_loop()
        fresh = loop.time() - FRESH_S
        futures: list[asyncio.Future[Rendered] | None] = []
        for event_id, _ in batch:
            at, fut = self._done.get(event_id, (0.0, None))
            futures.append(fut if fut is not None and (at >= fresh or not fut.done()) else None)
        missing = [(i, entry) for i, (entry, fut) in enumerate(zip(batch, futures, strict=True)) if fut is None]
        if missing:
            mine: dict[str, asyncio.Future[Rendered]] = {}
            for i, (event_id, _) in missing:
                # An event id twice in one batch (a backlog that overlaps the live queue): one future.
                fut = mine.get(event_id) or loop.create_future()
                mine[event_id] = futures[i] = fut
                self._done[event_id] = (loop.time(), fut)
                self._done.move_to_end(event_id)
            self._trim()
            todo = list({event_id: change for _, (event_id, change) in missing}.items())
            try:
                rendered = await in_db(_render, todo)
            except BaseException as exc:
                for event_id, fut in mine.items():
                    self._done.pop(event_id, None)  # the next one to ask tries again
                    if not fut.done():
                        fut.set_exception(exc)
                        fut.exception()  # retrieved: the waiters get it, no "never retrieved" warning
                raise
            self.renders += len(todo)
            for (event_id, _), result in zip(todo, rendered, strict=True):
                with contextlib.suppress(asyncio.InvalidStateError):
                    mine[event_id].set_result(result)
        return [await fut for fut in futures if fut is not None]

    def _trim(self) -> None:
        """Drop the oldest renderings past KEEP, and those no longer shared (FRESH_S)."""
        stale = asyncio.get_running_loop().time() - FRESH_S
        while self._done and (len(self._done) > self._keep or next(iter(self._done.values()))[0] < stale):
            self._done.popitem(last=False)


_RENDERER: tuple[asyncio.AbstractEventLoop, SharedRenderer] | None = None


def renderer() -> SharedRenderer:
    """The running event loop's renderer (web processes have one loop; its futures belong to it)."""
    global _RENDERER
    loop = asyncio.get_running_loop()
    if _RENDERER is None or _RENDERER[0] is not loop:
        _RENDERER = (loop, SharedRenderer())
    return _RENDERER[1]
