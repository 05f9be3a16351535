"""`fleetsim size`: the cheapest configuration of each pool meeting the SLOs.

For every option the scenario lists under a pool's ``sizing:`` (GPU kind,
TP degree, pipeline stages, weight precision), the fewest replicas meeting every SLO
at the scenario's load is found by bisection (latency falls as replicas grow), the
pool's other settings and the rest of the fleet unchanged and autoscaling
replaced by that fixed count. Candidates are ranked by cost per hour.
``max_rate`` answers the converse: the highest load a fixed fleet sustains.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

import sim
from sim.api import located
from sim.config.resolve import resolve
from sim.config.scenario import Scenario
from sim.config.slos import Slo
from sim.output.slo import margins
from sim.output.spans import pool_window
from sim.planning.budget import check_budget, replica_cap, search_bound, sizing_floor
from sim.planning.chosen import by_cost
from sim.planning.options import (OPTION_FIELDS, option_gpus, option_grid, option_source,
                                  option_values)
from sim.config.overrides import with_values
from sim.planning.progress import TrialCounter, Watch, option_text, run_trial
from sim.planning.runner import (Payload, map_tasks, scenario_from_payload, scenario_payload,
                                 side_by_side)
from sim.planning.trial import Trial, idle_row, reached, verdict
from sim.planning.verdict import Confidence, Verdict


# a trial that completed less than this share of its load in the window ran saturated:
# its throughput is the pool's capacity, and the load needs about replicas / share
SATURATED_SHARE = 0.8
# the next count tried is this much under the flow bound (steps batch a little better
# below saturation, so the bound slightly overstates what the load needs)
FLOW_BOUND_SLACK = 0.95
# past this many replicas a pool that kept up but missed its SLOs grows by a quarter
# rather than doubling (its latency is near the knee, not far from it)
FINE_GROWTH_FROM = 8


def next_count(trial: Trial) -> int:
    """The next replica count to try after ``trial`` missed the SLOs: the flow bound when
    it ran saturated (the load over its per-replica throughput), else double, or a
    quarter more for a large pool. Any count is correct (bisection finds the fewest from
    any bracket); a count near the answer saves trials."""
    n, share = trial.replicas, trial.served_share
    if share is not None and 0 < share < SATURATED_SHARE:
        return max(n + 1, math.floor(FLOW_BOUND_SLACK * n / share))
    return max(n + 1, math.ceil(1.25 * n)) if n >= FINE_GROWTH_FROM else 2 * n


def min_replicas(scenario: Scenario, pool: str, slos: list[Slo], option: dict,
                 max_replicas: int, confidence: Confidence | None = None, *,
                 estimate: bool = True, give_up: bool = True, floor: int | None = None,
                 counter: TrialCounter | None = None) -> tuple[int | None, dict[int, Trial]]:
    """Fewest replicas meeting the SLOs with ``option``, or None within the cap (each
    trial's verdict as sure as ``confidence`` asks). From ``floor`` (default: the pool's
    ``sizing.min_replicas``, else 1; never above the cap) the count grows
    until the SLOs are met (``estimate``: to the flow bound of a saturated trial, see
    :func:`next_count`; else doubling), then bisection finds the fewest. ``give_up``:
    a one-seed trial whose SLOs are missed for good stops there (cheaper, never wrong;
    replications for a confident verdict run whole, since their mean needs each run's
    figure). ``counter`` is told of each trial as it starts, with the most the search
    may still run (:func:`search_bound`'s worst case, less the trials run)."""
    trials: dict[int, Trial] = {}
    most = search_bound(max_replicas)[0]

    def trial(n: int) -> Trial:
        if n not in trials:
            if counter is not None:
                counter.start(option_text(pool, option, n), most - len(trials))
            scn = with_values(scenario, option_values(scenario, pool, option, n))
            # a run given up says only "above the target", not by how much: replications
            # averaged for a confident verdict need each run's own figure
            trials[n] = Trial(n, verdict(scn, pool, slos, confidence,
                                         give_up=give_up and confidence is None))
        return trials[n]

    lo = hi = min(max_replicas, sizing_floor(scenario, pool) if floor is None else floor)
    while not trial(hi).ok:                 # grow until it meets the SLOs
        if hi >= max_replicas:
            return None, trials
        grown = next_count(trials[hi]) if estimate else 2 * hi
        lo, hi = hi + 1, min(grown, max_replicas)
    return fewest(lo, hi, lambda n: trial(n).ok), trials


def fewest(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The least n in [lo, hi] with ``ok(n)``, by bisection, ``ok(hi)`` known to hold and
    ``ok`` taken as monotone (true from some n on; more replicas never hurt)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def size(scenario: Scenario, slos: list[Slo], pools: list[str] | None = None,
         watch: Watch | None = None, *,
         confidence: Confidence | None = None, executor: str = "local", workers: int = 1,
         scheduler: str | None = None) -> pd.DataFrame:
    """The cheapest replica count meeting ``slos`` for each option of each pool, each
    trial's verdict as sure as ``confidence`` asks (one seed when None). ``watch`` is
    told of each trial as it starts (:mod:`sim.planning.progress`), the run of the
    scenario as configured first; where the options are searched side by side on
    ``workers`` local processes or on Dask (``executor``), of each option as it ends.
    Each search runs on its own: the table is the same however many run it."""
    pools = pools or list(scenario.pools)
    check_budget(scenario, pools, confidence=confidence)
    grids = {pool: option_grid(scenario, pool) for pool in pools}
    most = {pool: search_bound(replica_cap(scenario, pool))[0] for pool in pools}
    counter = TrialCounter(watch, sum(len(grids[p]) * most[p] for p in pools))
    counter.start("the scenario as configured, to find the pools its requests reach", 1)
    ran = run_trial(scenario)               # the scenario as configured, run once
    _sends_requests(scenario, len(ran.requests))
    rows: list[dict | None] = []
    tasks: list[tuple[int, OptionTask]] = []
    busy = reached(scenario, ran.requests)
    for pool in pools:
        if pool not in busy:
            counter.most_after -= len(grids[pool]) * most[pool]
            rows.append(idle_row(scenario, pool))
            continue
        for option in grids[pool]:
            tasks.append((len(rows), (scenario_payload(scenario), pool, slos, option,
                                      confidence)))
            rows.append(None)
    if side_by_side(executor, workers, len(tasks)):
        def ended(done: int, total: int) -> None:
            if watch is not None and done < total:
                watch(f"{done} of {total} options searched side by side", done, total - done,
                      "option")
        found = map_tasks(option_task, [t for _, t in tasks], executor=executor,
                          workers=workers, scheduler=scheduler, progress=ended)
    else:
        found = []
        for _, (_, pool, _, option, _) in tasks:
            counter.most_after -= most[pool]
            found.append(_option_row(scenario, pool, slos, option, confidence, counter))
    for (at, _), row in zip(tasks, found):
        rows[at] = row
    table = _in_order(pd.DataFrame(rows), slos)
    if len(table) and "cost_usd_per_h" in table:
        table = by_cost(table, "pool", "feasible")
    return table.reset_index(drop=True)


LEADING = ("pool", *OPTION_FIELDS, "engine", "cost_model", "replicas", "gpus", "feasible",
           "cost_usd_per_h", "usd_per_million_output_tokens")


def _in_order(table: pd.DataFrame, slos: list[Slo]) -> pd.DataFrame:
    """The table's columns in one order, whichever row came first: the option and its
    answer, each SLO's estimate, its margin, then its interval and how sure, the note."""
    metrics = [s.metric for s in slos]
    order = [*LEADING, *metrics, *(f"margin_{m}" for m in metrics), "slo_margin_min",
             "output_tokens_per_s_per_gpu", "tokens_per_s_per_user", "replications",
             *(f"{m}_low" for m in metrics), *(f"{m}_high" for m in metrics), "confident",
             "simulations"]
    known = [c for c in order if c in table.columns]
    rest = [c for c in table.columns if c not in known and c != "note"]
    return table[known + rest + (["note"] if "note" in table.columns else [])]


# one option's search as a worker gets it: the scenario as plain data, the pool, the
# SLOs, the option and the confidence asked
OptionTask = tuple[Payload, str, list[Slo], dict, "Confidence | None"]


def option_task(task: OptionTask) -> dict:
    """Worker entry point: the size table's row for one option."""
    payload, pool, slos, option, confidence = task
    return _option_row(scenario_from_payload(payload), pool, slos, option, confidence)


def _sends_requests(scenario: Scenario, arrivals: int | None = None) -> None:
    """Refuse a scenario whose streams drew no request (a low rate over a short window may
    draw none): no load, nothing to size (every pool would read as idle capacity).
    ``arrivals``: the count from a run already at hand, else drawn here."""
    if arrivals is None:
        from sim.api import prepare
        arrivals = len(prepare(scenario).arrivals)
    if arrivals == 0:
        raise sim.ScenarioError(
            f"the streams drew no request in this run (seed {scenario.seed}): there is no "
            "load to size for; lengthen the run, raise the rates or try another seed",
            **located(scenario, ("workload", "streams")))


def _option_row(scenario: Scenario, pool: str, slos: list[Slo], option: dict,
                confidence: Confidence | None = None,
                counter: TrialCounter | None = None) -> dict:
    """The size table's row for one option of ``pool`` (``counter``: told of each trial
    as it starts)."""
    cap = replica_cap(scenario, pool)
    named = {"pool": pool, **option, **option_source(scenario, pool, option)}
    try:
        n, trials = min_replicas(scenario, pool, slos, option, cap, confidence,
                                 counter=counter)
    except sim.ScenarioError as exc:     # the option does not fit (memory, TP)
        return {**named, "replicas": None, "feasible": False, "note": exc.message}
    if n is None:
        last = trials[max(trials)]
        return {**named, "replicas": None, "feasible": False,
                **_sureness(last, None, confidence), "simulations": simulations(trials),
                "note": f"SLOs not met with {cap} replicas"
                        + ("" if last.verdict.certain is not False else
                           f" (by the estimate only, over {last.verdict.replications} "
                           "replications)")}
    best = trials[n]
    pool_sum = best.summary["pools"][pool]
    out_tok = sum(t["output_tokens"] for t in best.summary["teams"].values())
    first = best.verdict.first
    margin = margins(best.measured, slos)
    return {
        **named, "replicas": n, "gpus": n * option_gpus(option), "feasible": True,
        "cost_usd_per_h": pool_sum["cost_usd"] / (best.summary["end_s"] / 3600.0),
        # the bill inside the run's active span, as summary.json's (a closed loop that
        # ends early is not charged the idle rest of the run)
        "usd_per_million_output_tokens":
            pool_window(pool_sum)["cost_usd"] / out_tok * 1e6
        if out_tok else None,
        **best.measured,
        **{f"margin_{k}": v for k, v in margin.items()},
        "slo_margin_min": min(margin.values()),
        "output_tokens_per_s_per_gpu": first.output_tokens_per_s / (n * option_gpus(option))
        if first.output_tokens_per_s is not None else None,
        "tokens_per_s_per_user": 1.0 / first.tpot_p50_s if first.tpot_p50_s else None,
        "cost_model": pool_sum["cost_model"],      # (what the trial read: option_source's)
        **_sureness(best, trials.get(n - 1), confidence),
        "simulations": simulations(trials),
        "note": _uncertain_note(best, trials.get(n - 1)) if confidence else "",
    }


def simulations(trials: dict[int, Trial]) -> int:
    """The runs a search took: every replication of every trial."""
    return sum(t.verdict.replications for t in trials.values())


def _sureness(trial: Trial, below: Trial | None, confidence: Confidence | None) -> dict:
    """The confidence columns of a row: replications, each SLO's interval, and whether
    both the count chosen and the one below it were decided with confidence."""
    if confidence is None:
        return {}
    v = trial.verdict
    return {"replications": v.replications,
            **{f"{k}_low": v.low.get(k) for k in v.estimate},
            **{f"{k}_high": v.high.get(k) for k in v.estimate},
            "confident": bool(v.certain and (below is None or below.verdict.certain))}


def _uncertain_note(best: Trial, below: Trial | None) -> str:
    parts = []
    if not best.verdict.certain:
        parts.append(f"{best.replicas} replicas meet the SLOs by the estimate only "
                     f"({best.verdict.replications} replications)")
    if below is not None and not below.verdict.certain:
        parts.append(f"{below.replicas} miss them by the estimate only "
                     f"({below.verdict.replications} replications)")
    return "uncertain: " + "; ".join(parts) if parts else ""


def max_rate(scenario: Scenario, slos: list[Slo], pool: str, *, precision: float = 0.02,
             hi_scale: float = 64.0, confidence: Confidence | None = None,
             step: float = 2.0, verdicts: dict[float, Verdict] | None = None) -> dict:
    """The largest multiple of the scenario's load (its own ``rate_scale`` included) at which
    ``pool`` still meets the SLOs (each verdict as sure as ``confidence`` asks; with it,
    ``confident`` says whether the verdicts either side of the answer were both sure).

    The load is multiplied (or divided) by ``step`` until the answer is bracketed, at most
    to ``hi_scale`` times (or 1/``hi_scale`` of) the scenario's, then bisected to within
    ``precision``. ``verdicts`` (multiple -> verdict), when given, holds verdicts already
    at hand, which are taken rather than run again, and is left holding every one tried."""
    _sends_requests(scenario)
    own = scenario.workload.rate_scale          # scales are of the scenario's own load
    verdicts = {} if verdicts is None else verdicts

    def ok(scale: float) -> bool:
        if scale not in verdicts:
            verdicts[scale] = verdict(
                with_values(scenario, {"workload.rate_scale": own * scale}), pool, slos,
                confidence)
        return verdicts[scale].ok

    def sure(lo: float, hi: float | None) -> dict:
        if confidence is None:
            return {}
        either = [verdicts[x] for x in (lo, hi) if x in verdicts]
        return {"confident": all(v.certain for v in either),
                "replications": max((v.replications for v in either), default=0)}

    lo, hi = 0.0, 1.0
    if not ok(hi):          # below the scenario's load: divide until the SLOs hold
        while not ok(hi / step):
            hi /= step
            if hi <= 1.0 / hi_scale:
                return {"rate_scale": 0.0, "feasible": False, **sure(hi / step, None),
                        "note": f"SLOs not met even at 1/{hi_scale:g} of the load"}
        lo = hi / step
    while ok(hi):
        lo, hi = hi, hi * step
        if hi > hi_scale:
            return {"rate_scale": lo, "feasible": True, **sure(lo, None),
                    "note": f"still within the SLOs at {lo}x"}
        _, refused = resolve(with_values(scenario, {"workload.rate_scale": own * hi}))
        if refused:             # more requests than max_requests or this machine's memory
            return {"rate_scale": lo, "feasible": True, **sure(lo, None),
                    "note": f"still within the SLOs at {lo:g}x; {hi:g}x would be refused: "
                            f"{'.'.join(map(str, refused[0][0]))}: {refused[0][1]}"}
    while hi - lo > precision * max(hi, 1e-9):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    # the scenario's own load, from its trial at 1x (always run first): no run of its own
    base = verdicts[1.0].first.summary["requests"]["arrived"] / scenario.duration
    return {"rate_scale": lo, "feasible": True, "requests_per_s": lo * base,
            "requests_per_s_per_replica": lo * base / scenario.pools[pool].replicas,
            **sure(lo, hi)}


