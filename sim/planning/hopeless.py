"""Hopeless sizing trials: a run given up as soon as an SLO of its pool is missed beyond
any recovery, whatever the rest of the run would do.

A percentile SLO, say TTFT p99 <= T over the ``n`` requests that arrive in the measured
window, is missed once more of them are already known to exceed ``T`` than the
percentile leaves room for (``n - floor(q (n - 1))``, with numpy's linear percentile).
A request is known to exceed ``T`` when it completed above it, was refused or lost (its
latency is infinite), or is still open ``T`` after its arrival without the event the
latency waits for (its first token for TTFT, admission for the queueing delay, its last
token for E2E). Attainment is missed once more requests have failed some bound than
``1 - target`` of them. The count of requests arriving in the window over every stream
bounds ``n`` from above, which only delays the verdict (the room grows with ``n``), so a
run is never given up wrongly. Means are not judged early (one slow request can
be outweighed later), nor is any scenario whose arrival times are not all known in
advance (closed-loop clients, multi-turn sessions).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sim.config.slos import Slo
from sim.output.results import latencies
from sim.output.slo import POLICY_REFUSALS

# the event whose absence bounds a latency from below while a request is open
OPEN_BOUND = {"ttft": "first_token_s", "e2e": "finish_s", "queue": "admitted_s"}
# the recorded columns a request's latencies are derived from
LATENCY_INPUTS = ("arrival_s", "first_token_s", "finish_s", "admitted_s", "output_tokens")
# how often (a share of the arrival window) a trial is looked at
LOOKS_PER_RUN = 50


def room(n: int, q: float) -> int:
    """Values above a bound that push numpy's linear q-th percentile of ``n`` values
    above it: the value at index floor(q (n - 1)) of the sorted values and all after."""
    return n - math.floor(q / 100.0 * (n - 1))


@dataclass
class HopelessWatch:
    """Ask, every so often, whether ``pool`` has already missed one of ``slos`` for good
    (see the module's docstring); ``missed`` names the SLO metrics that were."""
    pool: str
    slos: list[Slo]
    warmup_s: float
    duration_s: float
    window_arrivals: int | None = None  # every request arriving in the window (0: unknown)
    missed: set[str] = field(default_factory=set)

    @property
    def every_s(self) -> float:
        return self.duration_s / LOOKS_PER_RUN

    def __call__(self, simulation) -> bool:
        if self.window_arrivals is None:
            self.window_arrivals = _window_arrivals(simulation.arrivals, self.warmup_s,
                                                    self.duration_s)
        if not self.window_arrivals:
            return False
        bad_any = self._failed(simulation)
        for slo in self.slos:
            if slo.metric == "attainment":
                if bad_any[0] > self.window_arrivals * (1.0 - slo.target) + 1e-9:
                    self.missed.add(slo.metric)
                continue
            name, stat = slo.metric.rsplit("_", 1)
            if stat != "mean" and bad_any[1][slo.metric] >= room(self.window_arrivals,
                                                                  int(stat[1:])):
                self.missed.add(slo.metric)
        return bool(self.missed)

    def _failed(self, simulation) -> tuple[int, dict[str, int]]:
        """(requests failing any latency bound, and per latency SLO those above it)."""
        now = simulation.env.now
        rec = simulation.recorder
        latency = [s for s in self.slos if s.metric != "attainment"]
        per: dict[str, np.ndarray] = {}
        code = rec.pools.get(self.pool)
        if code is not None:
            table = rec.requests
            arrival = table.column("arrival_s")
            mine = (table.column("pool") == code) & (arrival >= self.warmup_s)
            refused = [rec.reasons[r] for r in POLICY_REFUSALS if r in rec.reasons]
            mine &= ~np.isin(table.column("reject_reason"), refused)
            served = table.column("status")[mine] == rec.statuses["completed"]
            values = latencies({name: table.column(name)[mine] for name in LATENCY_INPUTS})
            values["max_itl_s"] = table.column("max_itl_s")[mine]
            for slo in latency:
                value = values[slo.metric.rsplit("_", 1)[0] + "_s"]
                per[slo.metric] = ~served | (value > slo.target)
        counts = {s.metric: int(per[s.metric].sum()) if code is not None else 0
                  for s in latency}
        failed_any = 0
        if code is not None:
            any_failed = ~served
            for mask in per.values():
                any_failed = any_failed | mask
            failed_any = int(any_failed.sum())
        for req in simulation.pools[self.pool].open_requests():
            waited = now - req.arrival_s
            if req.arrival_s < self.warmup_s:
                continue
            late = False
            for slo in latency:
                what = OPEN_BOUND.get(slo.metric.rsplit("_", 1)[0])
                if what is not None and waited > slo.target and \
                        math.isnan(getattr(req, what)):
                    counts[slo.metric] += 1
                    late = True
            failed_any += late
        return failed_any, counts


def _window_arrivals(arrivals, warmup_s: float, duration_s: float) -> int:
    """Requests arriving in the measured window over every stream; 0 where the arrival
    times are not all known in advance (closed-loop clients, sessions' later turns)."""
    if arrivals.refills or arrivals.num_timed != len(arrivals):
        return 0
    t = arrivals.arrival_s
    return int(((t >= warmup_s) & (t <= duration_s)).sum())


def hopeless_watch(scenario, pool: str, slos: list[Slo]) -> HopelessWatch | None:
    """The watch for one trial of ``pool``, or None when no SLO can be judged early."""
    if all(s.metric.endswith("_mean") for s in slos):
        return None
    return HopelessWatch(pool, slos, scenario.warmup, scenario.duration)
