"""`fleetsim size`: the cheapest configuration of each pool meeting the SLOs.

For every option the scenario lists under a pool's ``sizing:`` (GPU kind,
TP degree, weight precision), the fewest replicas meeting every SLO at the
scenario's load is found by bisection (latency falls as replicas grow), the
pool's other settings and the rest of the fleet unchanged and autoscaling
replaced by that fixed count. Candidates are ranked by cost per hour.
``max_rate`` answers the converse: the highest load a fixed fleet sustains.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import pandas as pd

import sim
from sim.config.scenario import Scenario
from sim.planning.overrides import with_values
from sim.config.resolve import resolve
from sim.config.slos import Slo
from sim.output.slo import margins, measure, met


@dataclass
class Trial:
    replicas: int
    measured: dict[str, float]
    ok: bool
    summary: dict


def stage_of(scenario: Scenario, pool: str) -> set[str]:
    """The served names whose requests pass through ``pool`` before ending on another: a
    disaggregated model's prefill pool, a cascade's first pool. Their latencies are this
    pool's work too (a prompt's TTFT is its prefill)."""
    names = set()
    for name, served in scenario.gateway.models.items():
        if served.disaggregated is not None and served.disaggregated.prefill == pool:
            names.add(name)
        if served.cascade is not None and served.cascade.first == pool:
            names.add(name)
    return names


def pool_requests(scenario: Scenario, requests: pd.DataFrame, pool: str) -> pd.DataFrame:
    """The requests (arrived after the warm-up) whose latencies ``pool`` shapes: those it
    served last, and those of a route it is an earlier stage of."""
    mine = requests["pool"].astype(str) == pool
    stages = stage_of(scenario, pool)
    if stages:
        mine |= requests["served_model"].astype(str).isin(stages)
    return requests[mine & (requests["arrival_s"] >= scenario.warmup)]


def evaluate(scenario: Scenario, pool: str, slos: list[Slo]) -> tuple[dict, bool, dict]:
    res = sim.run(scenario)
    measured = measure(pool_requests(scenario, res.requests, pool), slos)
    return measured, met(measured, slos), res.summary


def reaches(scenario: Scenario, pool: str) -> bool:
    """Whether any request of the scenario as configured reaches ``pool`` (an idle pool,
    allowed in a scenario, has nothing to size)."""
    return len(pool_requests(scenario, sim.run(scenario).requests, pool)) > 0


IDLE_NOTE = "no request reaches this pool (idle capacity): nothing to size"


def _option_grid(scenario: Scenario, pool: str) -> list[dict]:
    cfg = scenario.pools[pool]
    opts = cfg.sizing
    hardware = (opts.hardware if opts and opts.hardware else [cfg.hardware])
    tps = (opts.tp if opts and opts.tp else [cfg.tp])
    dtypes = (opts.weight_dtype if opts and opts.weight_dtype else [cfg.weight_dtype])
    return [{"hardware": h, "tp": t, "weight_dtype": d}
            for h, t, d in itertools.product(hardware, tps, dtypes)]


def min_replicas(scenario: Scenario, pool: str, slos: list[Slo], option: dict,
                 max_replicas: int) -> tuple[int | None, dict[int, Trial]]:
    """Fewest replicas meeting the SLOs with ``option``, or None within the cap."""
    base = {f"pools.{pool}.{k}": v for k, v in option.items()}
    if option["weight_dtype"] in ("fp8", "int8"):
        base[f"pools.{pool}.kv_dtype"] = "fp8"
    base[f"pools.{pool}.autoscaler"] = None
    trials: dict[int, Trial] = {}

    def trial(n: int) -> Trial:
        if n not in trials:
            scn = with_values(scenario, {**base, f"pools.{pool}.replicas": n})
            measured, ok, summary = evaluate(scn, pool, slos)
            trials[n] = Trial(n, measured, ok, summary)
        return trials[n]

    lo, hi = 1, 1
    while not trial(hi).ok:                 # grow until it meets the SLOs
        if hi >= max_replicas:
            return None, trials
        lo, hi = hi + 1, min(2 * hi, max_replicas)
    while lo < hi:                          # fewest in [lo, hi] that meets them
        mid = (lo + hi) // 2
        if trial(mid).ok:
            hi = mid
        else:
            lo = mid + 1
    return hi, trials


def size(scenario: Scenario, slos: list[Slo], pools: list[str] | None = None) -> pd.DataFrame:
    rows = []
    for pool in pools or list(scenario.pools):
        cfg = scenario.pools[pool]
        cap = cfg.sizing.max_replicas if cfg.sizing else 64
        if not reaches(scenario, pool):
            rows.append({"pool": pool, "hardware": cfg.hardware, "tp": cfg.tp,
                         "weight_dtype": cfg.weight_dtype, "replicas": 0, "gpus": 0,
                         "feasible": True, "cost_usd_per_h": 0.0, "note": IDLE_NOTE})
            continue
        for option in _option_grid(scenario, pool):
            try:
                n, trials = min_replicas(scenario, pool, slos, option, cap)
            except sim.ScenarioError as exc:     # the option does not fit (memory, TP)
                rows.append({"pool": pool, **option, "replicas": None, "feasible": False,
                             "note": exc.message})
                continue
            if n is None:
                rows.append({"pool": pool, **option, "replicas": None, "feasible": False,
                             "note": f"SLOs not met with {cap} replicas"})
                continue
            best = trials[n]
            pool_sum = best.summary["pools"][pool]
            gpus = n * option["tp"]
            out_tok = sum(t["output_tokens"] for t in best.summary["teams"].values())
            cost_h = pool_sum["cost_usd"] / (best.summary["end_s"] / 3600.0)
            rows.append({
                "pool": pool, **option, "replicas": n, "gpus": gpus, "feasible": True,
                "cost_usd_per_h": cost_h,
                "usd_per_million_output_tokens": pool_sum["cost_usd"] / out_tok * 1e6
                if out_tok else None,
                **{f"{k}": v for k, v in best.measured.items()},
                **{f"margin_{k}": v for k, v in margins(best.measured, slos).items()},
                "note": "",
            })
    table = pd.DataFrame(rows)
    if len(table) and "cost_usd_per_h" in table:
        table = table.sort_values(["pool", "feasible", "cost_usd_per_h"],
                                  ascending=[True, False, True], kind="stable")
    return table.reset_index(drop=True)


def max_rate(scenario: Scenario, slos: list[Slo], pool: str, *, precision: float = 0.02,
             hi_scale: float = 64.0) -> dict:
    """The largest multiple of the scenario's load (its own ``rate_scale`` included) at which
    ``pool`` still meets the SLOs."""
    own = scenario.workload.rate_scale          # scales are of the scenario's own load

    def ok(scale: float) -> bool:
        return evaluate(with_values(scenario, {"workload.rate_scale": own * scale}), pool,
                        slos)[1]

    lo, hi = 0.0, 1.0
    if not ok(hi):          # below the scenario's load: halve until the SLOs hold
        while not ok(hi / 2):
            hi /= 2
            if hi <= 1.0 / hi_scale:
                return {"rate_scale": 0.0, "feasible": False,
                        "note": f"SLOs not met even at 1/{hi_scale:g} of the load"}
        lo = hi / 2
    while ok(hi):
        lo, hi = hi, hi * 2
        if hi > hi_scale:
            return {"rate_scale": lo, "feasible": True,
                    "note": f"still within the SLOs at {lo}x"}
        _, refused = resolve(with_values(scenario, {"workload.rate_scale": own * hi}))
        if refused:             # more requests than max_requests or this machine's memory
            return {"rate_scale": lo, "feasible": True,
                    "note": f"still within the SLOs at {lo:g}x; {hi:g}x would be refused: "
                            f"{'.'.join(map(str, refused[0][0]))}: {refused[0][1]}"}
    while hi - lo > precision * max(hi, 1e-9):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    base = sim.run(scenario).summary["requests"]["arrived"] / scenario.duration
    return {"rate_scale": lo, "feasible": True, "requests_per_s": lo * base,
            "requests_per_s_per_replica": lo * base / scenario.pools[pool].replicas}
