"""The fleet heatmap's data: every GPU of the hosts a fleet query matches, one cell each, as a
compact JSON payload that a canvas draws (16,000 GPUs would be 16,000 heavy DOM nodes otherwise).

The payload is columnar and dictionary-coded: hosts once, then per cell (in host order, GPUs by
index) small integers into `states`, `models` and `teams`, and the utilisation. Its `version` is a
hash of the content; the payload is kept a few minutes in the cache under it, so a poll that
names the version it has (`since`) gets only the cells that changed (`heatmap_diff`), or nothing.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.core.cache import cache

from allocation.models import LeaseGpu
from core.roles import is_pool_admin
from frontend.fleet_page import matching_hosts
from frontend.list_page import ListQuery
from inventory.choices import GpuState
from inventory.models import Gpu

GROUPS = {"host": "Host", "rack": "Rack", "source": "Source"}
# Host labels that name a rack, first found wins (SSH inventories say rack; Kubernetes nodes carry
# topology labels).
RACK_LABELS = ("rack", "topology.kubernetes.io/rack", "topology.kubernetes.io/zone")
STATES = [value for value, _ in GpuState.choices]
OTHER_TEAM = "another team"
KEEP_S = 300  # how long a version stays diffable


def rack_of(labels: Any) -> str:
    if isinstance(labels, dict):
        for key in RACK_LABELS:
            if labels.get(key):
                return str(labels[key])
    return "no rack"


def heatmap(*, user: Any, query: ListQuery, group: str = "host") -> dict[str, Any]:
    """The payload for the hosts `query` matches (its pool, model, state and name filters), hosts in
    natural name order within their group (rack or source; one group for "host").

    Three queries whatever the fleet's size, filtered by subqueries (16,000 ids as parameters cost
    more than the rows): the hosts, their GPUs, and who holds them."""
    matching = matching_hosts(query)
    gpus = Gpu.objects.filter(host_id__in=matching.values("pk"), parent__isnull=True, gone=False)
    if query.get("pool"):
        gpus = gpus.filter(pool__name=query.get("pool"))
    by_host: dict[int, list[tuple[Any, ...]]] = {}
    for row in gpus.values_list("host_id", "index", "pk", "model", "state", "utilization_pct").order_by(
            "host_id", "index", "pk"):
        by_host.setdefault(row[0], []).append(row)

    def key(host: tuple[Any, ...]) -> str:
        return rack_of(host[3]) if group == "rack" else host[2] if group == "source" else ""

    # Name order (natural collation) from the query; a stable sort keeps it within a group.
    hosts = sorted(matching.order_by("name", "pk").values_list("pk", "name", "source__name", "labels", "state"),
                   key=key)
    teams = _holders(user)
    groups: dict[str, int] = {}
    models: dict[str, int] = {}
    team_codes: dict[str, int] = {"": 0}
    state_codes = {s: i for i, s in enumerate(STATES)}
    out_hosts, n, index, model, state, util, team = [], [], [], [], [], [], []
    for host in hosts:
        host_rows = by_host.get(host[0])
        if not host_rows:
            continue
        out_hosts.append([host[0], host[1], groups.setdefault(key(host), len(groups)), host[4]])
        n.append(len(host_rows))
        for _, idx, gpu_id, gpu_model, gpu_state, gpu_util in host_rows:
            index.append(idx)
            model.append(models.setdefault(gpu_model, len(models)))
            state.append(state_codes.get(gpu_state, 0))
            util.append(-1 if gpu_util is None else round(gpu_util))
            team.append(team_codes.setdefault(teams.get(gpu_id, ""), len(team_codes)))
    # GPU indexes are left out (null) where every host numbers its GPUs 0, 1, 2…: the usual case.
    counted = _numbered(n, index)
    body = {"group": group, "groups": list(groups), "states": STATES, "models": list(models),
            "teams": list(team_codes), "hosts": out_hosts,
            "cells": {"n": n, "i": None if counted else index, "m": model, "s": state, "u": util, "t": team}}
    body["version"] = _version(body)
    return body


def _numbered(counts: list[int], index: list[int]) -> bool:
    """Whether each host's GPUs are numbered 0, 1, 2… in order."""
    pos = 0
    for count in counts:
        if index[pos:pos + count] != list(range(count)):
            return False
        pos += count
    return True


def _holders(user: Any) -> dict[int, str]:
    """The team holding each leased GPU; a member sees other teams as "another team", as on the
    cards. Every active hold, unfiltered: at most one row per GPU of the fleet, and a filter by
    the matching GPUs (nested subqueries) made PostgreSQL take seconds instead of milliseconds."""
    mine = None if is_pool_admin(user) else set(user.teams.values_list("name", flat=True))
    rows = LeaseGpu.objects.filter(active=True).values_list("gpu_id", "lease__team__name")
    return {gid: team if mine is None or team in mine else OTHER_TEAM for gid, team in rows}


def _version(body: dict[str, Any]) -> str:
    # repr, not JSON: half the cost, and only this process's hashes are compared (the cache is
    # keyed by user and version, and a version another process made is merely unknown here).
    return hashlib.sha256(repr(body).encode()).hexdigest()[:16]


def _key(user: Any, version: str) -> str:
    # Per user: a member's payload hides teams an admin's shows.
    return f"fleet-heatmap:{user.pk}:{version}"


def remember(user: Any, body: dict[str, Any]) -> None:
    cache.set(_key(user, body["version"]), body, KEEP_S)


def heatmap_diff(user: Any, body: dict[str, Any], since: str) -> dict[str, Any] | None:
    """The cells that changed since version `since`, or None when that version is unknown (expired,
    another process's cache down) or the hosts differ (filtered differently, a host came or went):
    the caller then sends the whole payload. A changed cell is [position, state, utilisation,
    team, model] with the new dictionaries (a new team or model may have come); a host whose state
    changed is [its position, its state]."""
    old = cache.get(_key(user, since))
    if not old or [h[:3] for h in old["hosts"]] != [h[:3] for h in body["hosts"]] \
            or old["cells"]["n"] != body["cells"]["n"]:
        return None
    hosts = [[k, h[3]] for k, (h, was) in enumerate(zip(body["hosts"], old["hosts"], strict=True)) if h[3] != was[3]]
    o, c = old["cells"], body["cells"]
    # The client swaps in the new dictionaries, so comparing the codes is enough: a team that
    # came shifts the codes after it, and those cells are sent.
    changed = [[i, c["s"][i], c["u"][i], c["t"][i], c["m"][i]] for i in range(len(c["s"]))
               if (o["s"][i], o["u"][i], o["t"][i], o["m"][i]) != (c["s"][i], c["u"][i], c["t"][i], c["m"][i])]
    return {"version": body["version"], "since": since, "teams": body["teams"], "models": body["models"],
            "changed": changed, "host_states": hosts}
