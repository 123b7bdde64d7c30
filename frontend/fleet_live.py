"""Partial updates of the fleet's cards and table: a poll sends back only the hosts that changed.

The live part of a fleet page carries a `version` (a hash of what its hosts show). Every 5 s it
asks for the same page with that version (`v`); the answer is
- nothing (204) when nothing changed,
- the changed host cards or table rows (HTMX out-of-band swaps, by their ids), the legend when a
  count changed, and the new version, when the same hosts are on the page,
- the whole live part (swapped out of band) when the page's hosts changed or the version is unknown.

What each host shows is digested from its data (the host's and its GPUs' fields, holders, idle
flags), not from rendered HTML, so only changed rows are rendered at all. Digests are kept a few
minutes in the cache under their version.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from frontend.list_page import ListPage
from frontend.selectors import GpuTile, HostRow

KEEP_S = 300


def _fields(obj: Any) -> list[tuple[str, Any]]:
    """An object's own fields (annotations included), without Django's internals and the related
    rows it cached (those are digested through their own fields)."""
    return sorted((k, v) for k, v in vars(obj).items() if not k.startswith("_"))


def _tile(t: GpuTile) -> tuple[Any, ...]:
    return (_fields(t.gpu), t.gpu.pool.name, t.lease_id, t.lease_team, t.visible, t.idle_since,
            str(t.sharing or ""), [_tile(s) for s in t.slices])


def row_digest(row: HostRow) -> str:
    host = row.host
    data = (_fields(host), _fields(host.source), row.pools, [_tile(t) for t in row.gpus])
    return hashlib.sha256(repr(data).encode()).hexdigest()[:16]


def live_state(page: ListPage[HostRow]) -> dict[str, Any]:
    """What the page shows, digested: its frame (which hosts, where in the result), its counts
    and one digest per host; `version` names it all."""
    frame = [page.total, page.page, page.pages, [row.host.pk for row in page.rows]]
    digests = {row.host.pk: row_digest(row) for row in page.rows}
    counts = [list(c) for c in page.counts]
    version = hashlib.sha256(repr((frame, counts, sorted(digests.items()))).encode()).hexdigest()[:16]
    return {"version": version, "frame": frame, "counts": counts, "digests": digests}


def _key(user: Any, version: str) -> str:
    return f"fleet-live:{user.pk}:{version}"


def remember(user: Any, state: dict[str, Any]) -> None:
    cache.set(_key(user, state["version"]), state, KEEP_S)


def live_diff(request: HttpRequest, page: ListPage[HostRow], context: dict[str, Any], *,
              full: str, row: str) -> HttpResponse:
    """The answer to a poll carrying version `v` (see the module); `full` renders the live part,
    `row` one host (as `row`, with `oob` set)."""
    state = live_state(page)
    since = request.GET.get("v", "")
    if since == state["version"]:
        return HttpResponse(status=204)
    remember(request.user, state)
    context = {**context, "live_version": state["version"]}
    old = cache.get(_key(request.user, since)) if since else None
    if not old or old["frame"] != state["frame"]:
        # Only the root swaps out of band: htmx would take marked rows inside it out on their own.
        return HttpResponse(render_to_string(full, {**context, "oob_root": True}, request))
    context["oob"] = True
    parts: list[str] = [render_to_string(row, {**context, "row": r}, request)
             for r in page.rows if old["digests"].get(r.host.pk) != state["digests"][r.host.pk]]
    if old["counts"] != state["counts"]:
        parts.append(render_to_string("frontend/partials/fleet_legend.html", context, request))
    parts.append(f'<input type="hidden" id="fleet-version" name="v" value="{state["version"]}" '
                 'hx-swap-oob="true">')
    return HttpResponse("\n".join(parts))
