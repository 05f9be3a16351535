"""Saturated rows of the GPU validation table, checked by capacity.

An MLPerf Server (or Interactive) result is published at the highest rate the submitter
found within the benchmark's latency bounds: the engine runs at the edge of what it
sustains. There a relative step-time error e becomes a queueing-delay error of about
(2 + rho/(1 - rho))·e (M/G/1: 11x at rho = 0.9) while capacity moves only by e, so the
row's exact latencies are ill-conditioned: a simulator checked on them measures the
amplifier, not its model. Such a row (``saturated:`` in the table, with its bounds and
their source) is checked instead by:

- the bounds at the published rate: whether the simulated fleet meets each one (a p99 of
  the requests that arrived after the warm-up, one that never completed counting as
  infinite, as ``fleetsim size`` judges an SLO), and the simulated figures;
- the capacity ratio: the largest rate at which the simulated fleet meets the bounds
  over the published rate, found by ``fleetsim size --max-rate``'s search
  (:func:`sim.planning.size.max_rate`) with the row's own seed: the load is multiplied
  (or divided) by 1.25 until the answer is bracketed, at most to 2x (or 1/2) of the
  published rate, then bisected to 2%: at most 8 runs (the published rate's among them,
  run already), and one more at the capacity found. The published rate is a lower bound
  on the real engine's capacity under the bounds, and close to it, so a good model gives
  a ratio in [1.0, 1.15];
- the bound that binds there: the one most exceeded at the smallest rate the search tried
  past the largest within the bounds (near capacity a queue runs away, and the bound it
  breaks binds, whichever was nearer its limit below), beside the one the published
  figures put nearest its limit (a publication has one rate only);
- the latencies at the same fraction of each side's own capacity: the publication's rate is
  taken as its engine's capacity (the submitter raised it until a bound broke), so the
  simulated figures are read at the simulated capacity. Where the search found none (the
  fleet still within the bounds at 2x, or missing them at 1/2), the ratio is a bound only
  and the latencies are reported but counted in no median.
"""
from __future__ import annotations

from collections.abc import Callable

import sim
from sim.config.slos import Slo
from sim.config.overrides import with_values
from sim.planning.size import max_rate
from sim.planning.trial import verdict

STEP = 1.25                 # the factor the load moves by until the answer is bracketed
HI_SCALE = 2.0              # no further than 2x (or 1/2) of the published rate
PRECISION = 0.02            # then bisected to 2% of the rate


def only_pool(scenario) -> str:
    """The one pool of a saturated row's scenario (the search scales one pool's load)."""
    pools = list(scenario.pools)
    if len(pools) != 1:
        raise ValueError(f"a saturated row's scenario names one pool, whose capacity the "
                         f"search finds; this one names {len(pools)}: {', '.join(pools)}")
    return pools[0]


def binding(measured_s: dict[str, float], bounds_s: dict[str, float]) -> str | None:
    """The bound with the least relative margin (bound - figure) / bound; None when no
    bound has a figure."""
    margins = {k: (b - measured_s[k]) / b for k, b in bounds_s.items()
               if measured_s.get(k) is not None}
    return min(margins, key=margins.__getitem__) if margins else None


def published_binding(published: dict[str, float], bounds_s: dict[str, float]) -> str | None:
    """The bound the published figures (``ttft_p99_ms`` ...) put nearest its limit."""
    return binding({k: published[f"{k}_ms"] / 1e3 for k in bounds_s
                    if f"{k}_ms" in published}, bounds_s)


def check(scenario, bounds_s: dict[str, float], published: dict[str, float], results,
          read: Callable[[object, object], dict[str, float]]) -> dict:
    """A saturated row's check (the module's docstring): ``scenario`` at the published
    rate, ``results`` its run (taken as the search's first trial), ``read(scenario,
    results)`` the row's figures from a run."""

    pool = only_pool(scenario)
    slos = [Slo(metric, target) for metric, target in bounds_s.items()]
    verdicts = {1.0: verdict(scenario, pool, slos, None, ran=results)}
    found = max_rate(scenario, slos, pool, precision=PRECISION, hi_scale=HI_SCALE,
                     step=STEP, verdicts=verdicts)
    ratio = float(found["rate_scale"])
    exact = "requests_per_s" in found       # bracketed and bisected, not a bound only
    # the bound that binds: the one most exceeded at the smallest rate tried past the
    # largest within them (near capacity a queue runs away: the bound it breaks binds,
    # whichever was nearer its limit below); with none tried past it, the nearest there
    past = [k for k, v in verdicts.items() if k > ratio and not v.ok]
    binds_at = verdicts[min(past)] if past else verdicts.get(ratio)
    out = {
        "bounds_ms": {k: v * 1e3 for k, v in bounds_s.items()},
        "at_published": {"meets": verdicts[1.0].ok,
                         "measured_ms": {k: v * 1e3 for k, v in verdicts[1.0].estimate.items()}},
        "capacity_ratio": ratio,
        # found: bisected to PRECISION; above / below: the fleet met the bounds at the
        # largest rate tried, or missed them at the smallest
        "capacity": "found" if exact else ("above" if found["feasible"] else "below"),
        "note": found.get("note", ""),
        "runs": len(verdicts),
        "binding": binding(binds_at.estimate, bounds_s) if binds_at is not None else None,
        "published_binding": published_binding(published, bounds_s),
        "at_capacity": None,
    }
    if exact:
        own = scenario.workload.rate_scale
        at = with_values(scenario, {"workload.rate_scale": own * ratio})
        got = read(at, sim.run(at))
        out["at_capacity"] = {
            "rate_scale": ratio,
            "predicted": {k: got[k] for k in published},
            "error": {k: (got[k] - v) / v for k, v in published.items()}}
    return out
