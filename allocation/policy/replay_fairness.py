"""The replay's fairness measures (`allocation.policy.replay`'s `jain_index`,
`jain_index_backlogged`, `backlogged_s`, the teams' entitled and achieved shares), integrated
over the time between the events the replay processes.

Fairness, two ways; both normalise what a team holds by its entitlement, the weighted
water-filling of `fairshare.entitled_allocation` over the pool's capacity and the teams' demand
(held + pending GPUs there), with their guarantees, limits and weights:
- `jain_index`: over *backlogged intervals* (at least two teams with pending work), each team's
  achieved GPU-seconds against its entitled GPU-seconds, summed over the run; Jain's index of
  achieved/entitled over teams, 1.0 when no interval was contended. A team starved for an hour
  and favoured the next can still score 1.0.
- `jain_index_backlogged`: the same question asked at every instant. A pool is *backlogged*
  while some team has pending work there and at least two teams have demand there (hold or wait
  for GPUs of it). At such an instant, x_i = held_i / entitled_i over the teams with demand
  (entitled_i > 0), and J(t) = (sum x_i)^2 / (n * sum x_i^2), Jain's index with each team's
  throughput normalised by its fair allocation (Jain, Chiu and Hawe 1984). J(t) is averaged
  over the backlogged time, each pool weighted by its capacity (capacity-seconds), 1.0 when no
  pool was ever backlogged; `backlogged_s` is how long at least one pool was. When every team
  with demand is backlogged and no quota binds, entitled_i is proportional to weight_i and
  J(t) is Jain's index of the weighted shares held_i / weight_i. Normalising by the
  entitlement rather than the weight alone keeps a team that holds more than its share
  without waiting for more (FIFO's early flooder) in the index, and does not count a
  guarantee or a limit the policy must honour as unfairness. The state is constant between
  events, so J is integrated on the events the replay processes anyway (no sampling).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from allocation.policy.fairshare import entitled_allocation
from allocation.policy.measures import jain, jain_by_level
from allocation.policy.types import QuotaView


class FairnessMeter:
    """Both measures over one replay. It reads the replay's books, which the replay changes in
    place: GPUs held and waiting per (team, pool), waiting GPUs per pool, waiting jobs per team."""

    def __init__(self, capacity: Mapping[str, int], weights: Mapping[str, float],
                 quotas: Mapping[tuple[str, str], QuotaView], held: Mapping[tuple[str, str], int],
                 waiting: Mapping[tuple[str, str], int], pool_waiting: dict[str, int],
                 waiting_jobs: Mapping[str, int]) -> None:
        self.capacity, self.weights, self.quotas = capacity, weights, quotas
        self.held, self.waiting, self.pool_waiting, self.waiting_jobs = held, waiting, pool_waiting, waiting_jobs
        # (team, (team, pool)) per pool: the books' keys, built once for the per-event measures.
        self.team_keys = {pool: [(team, (team, pool)) for team in weights] for pool in capacity}
        self.achieved: dict[str, float] = defaultdict(float)
        self.entitled: dict[str, float] = defaultdict(float)
        self.contended_capacity_s = 0.0
        # jain_index_backlogged: the integral of J(t) x capacity, and of capacity, over the
        # backlogged time of each pool; backlogged_s: the time some pool was backlogged.
        self.backlogged_jain_s = self.backlogged_capacity_s = self.backlogged_s = 0.0
        # (pool, demand per team) -> entitlement per team
        self._entitled_cache: dict[tuple[str, tuple[tuple[str, int], ...]], dict[str, float]] = {}

    def measure(self, dt: float) -> None:
        """Integrate both fairness measures (module docstring) over the `dt` seconds before
        the current event, during which nothing changed."""
        contended = sum(1 for n in self.waiting_jobs.values() if n > 0) >= 2
        backlogged = False
        for pool, capacity in self.capacity.items():
            fair = self._entitlement(pool, capacity) if contended else None
            if fair is not None:
                for team, share in fair.items():
                    self.entitled[team] += share * dt
                    self.achieved[team] += self.held.get((team, pool), 0) * dt
                self.contended_capacity_s += capacity * dt
            index = self._backlogged_jain(pool, capacity, fair)
            if index is not None:
                backlogged = True
                self.backlogged_jain_s += index * capacity * dt
                self.backlogged_capacity_s += capacity * dt
        if backlogged:
            self.backlogged_s += dt

    def _backlogged_jain(self, pool: str, capacity: int,
                         fair: dict[str, float] | None) -> float | None:
        """J(t) of the module docstring for `pool` in the current state; None while the pool is
        not backlogged (no team waits there, or fewer than two teams have demand there).
        `fair`: the pool's entitlement now, if already worked out."""
        if not self.pool_waiting[pool]:
            return None
        demand = [(team, held) for team, key in self.team_keys[pool]
                  if (held := self.held.get(key, 0)) or self.waiting.get(key, 0)]
        if len(demand) < 2:
            return None
        fair = fair or self._entitlement(pool, capacity)
        return jain([held / fair[team] for team, held in demand if fair[team] > 1e-9])

    def _entitlement(self, pool: str, capacity: int) -> dict[str, float]:
        demand = tuple(sorted((team, self.held.get((team, pool), 0) + self.waiting.get((team, pool), 0))
                              for team in self.weights))
        hit = self._entitled_cache.get((pool, demand))
        if hit is None:
            guaranteed, limit = {}, {}
            for team, _ in demand:
                quota = self.quotas.get((team, pool))
                guaranteed[team] = quota.guaranteed if quota else 0
                limit[team] = quota.limit if quota else None
            hit = entitled_allocation(capacity, dict(demand), guaranteed, limit, self.weights)
            if len(self._entitled_cache) > 100_000:
                self._entitled_cache.clear()
            self._entitled_cache[(pool, demand)] = hit
        return hit

    # --- the results ------------------------------------------------------------------------------

    def jain_index(self) -> float:
        ratios = [self.achieved[t] / self.entitled[t] for t in self.weights if self.entitled[t] > 1e-9]
        return round(jain(ratios), 4)

    def by_level(self, parents: Mapping[str, str]) -> dict[str, object]:
        """`jain_index_by_level` with a team tree; nothing without one."""
        if not parents:
            return {}
        return {"jain_index_by_level": jain_by_level(self.achieved, self.entitled, parents,
                                                     [t for t in self.weights if self.entitled[t] > 1e-9])}

    def shares(self, team: str) -> dict[str, float]:
        """A team's entitled and achieved shares of the contended capacity-seconds."""
        cap_s = self.contended_capacity_s
        return {"entitled_share": round(self.entitled[team] / cap_s, 4) if cap_s else 0.0,
                "achieved_share": round(self.achieved[team] / cap_s, 4) if cap_s else 0.0}

    def backlogged_index(self) -> float:
        return round(self.backlogged_jain_s / self.backlogged_capacity_s, 4) if self.backlogged_capacity_s else 1.0
