"""The replay's summary measures: percentiles and Jain's fairness index."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks; 0.0 for no values."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def jain(values: Sequence[float]) -> float:
    if not values or not any(values):
        return 1.0
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def jain_by_level(achieved: Mapping[str, float], entitled: Mapping[str, float],
                  parents: Mapping[str, str], teams: Sequence[str]) -> dict[str, float]:
    """Jain's index of achieved ÷ entitled GPU-seconds at each depth of the team tree, by depth
    ("0": the roots, the departments at the top): at depth d a team counts toward its ancestor
    at that depth (itself where the tree is shallower there), so the deepest level is the teams'
    own index. The entitlement is the teams' own (flat water-filling), summed up the tree."""
    paths = {}
    for team in teams:
        path, node = [team], parents.get(team)
        while node is not None and node not in path:
            path.append(node)
            node = parents.get(node)
        paths[team] = path[::-1]  # root first
    deepest = max((len(p) for p in paths.values()), default=1)
    out = {}
    for depth in range(deepest):
        got: dict[str, float] = {}
        due: dict[str, float] = {}
        for team, path in paths.items():
            node = path[min(depth, len(path) - 1)]
            got[node] = got.get(node, 0.0) + achieved.get(team, 0.0)
            due[node] = due.get(node, 0.0) + entitled.get(team, 0.0)
        out[str(depth)] = round(jain([got[n] / due[n] for n in sorted(due) if due[n] > 1e-9]), 4)
    return out
