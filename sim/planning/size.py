"""`fleetsim size`: the cheapest configuration of each pool meeting the SLOs.

For every option the scenario lists under a pool's ``sizing:`` (GPU kind,
TP degree, pipeline stages, weight precision), the fewest replicas meeting every SLO
at the scenario's load is found by bisection (latency falls as replicas grow), the
pool's other settings and the rest of the fleet unchanged and autoscaling
replaced by that fixed count. Candidates are ranked by cost per hour.
``max_rate`` answers the converse: the highest load a fixed fleet sustains.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

import sim
from sim.config.sanity import MAX_FLEET_REPLICAS, most_replicas
from sim.api import located
from sim.config.scenario import Scenario
from sim.planning.hopeless import hopeless_watch
from sim.planning.overrides import with_values
from sim.planning.progress import TrialCounter, Watch, option_text, run_trial
from sim.planning.runner import (Payload, map_tasks, scenario_from_payload, scenario_payload,
                                 side_by_side)
from sim.config.resolve import resolve
from sim.config.slos import Slo
from sim.output.slo import margins, measure
from sim.output.spans import pool_window
from sim.planning.verdict import Confidence, Verdict, judge


@dataclass
class Trial:
    replicas: int
    verdict: Verdict

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    @property
    def measured(self) -> dict[str, float]:
        return self.verdict.estimate

    @property
    def summary(self) -> dict:
        """The summary of the trial's first replication (its seed the scenario's)."""
        return self.verdict.first.summary

    @property
    def served_share(self) -> float | None:
        return self.verdict.first.served_share


@dataclass(frozen=True)
class Observed:
    """What sizing keeps of a trial's first replication: its summary, and the pool's
    served share: the requests it completed in the measured window (from the warm-up to
    the end of arrivals, whenever they arrived) over those that arrived in it. A pool
    short of capacity completes its capacity: the share is then capacity / load."""
    summary: dict
    served_share: float | None
    given_up: bool = False              # ended early: an SLO was missed for good
    # the pool's output tokens per second and TPOT p50 over its requests after the warm-up
    # (the size table's per-GPU and per-user speeds)
    output_tokens_per_s: float | None = None
    tpot_p50_s: float | None = None


def served_share(requests: pd.DataFrame, start_s: float, end_s: float) -> float | None:
    arrival, finish = requests["arrival_s"], requests["finish_s"]
    arrived = int(((arrival >= start_s) & (arrival <= end_s)).sum())
    if not arrived:
        return None
    done = (requests["status"].astype(str) == "completed") & (finish >= start_s) & \
        (finish <= end_s)
    return float(done.sum() / arrived)


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


def pool_requests(scenario: Scenario, requests: pd.DataFrame, pool: str | tuple[str, ...],
                  *, after_warmup: bool = True) -> pd.DataFrame:
    """The requests (arrived after the warm-up) whose latencies ``pool`` (or any of a tuple
    of pools sized together) shapes: those it served last, and those of a route it is an
    earlier stage of."""
    pools = (pool,) if isinstance(pool, str) else pool
    mine = requests["pool"].astype(str).isin(pools)
    stages = set().union(*(stage_of(scenario, p) for p in pools))
    if stages:
        mine |= requests["served_model"].astype(str).isin(stages)
    if after_warmup:
        mine &= requests["arrival_s"] >= scenario.warmup
    return requests[mine]


def evaluate(scenario: Scenario, pool: str, slos: list[Slo]) -> tuple[dict, bool, dict]:
    """One run's SLO figures on ``pool``, whether they meet ``slos``, and its summary."""
    one = verdict(scenario, pool, slos, None)
    return one.estimate, one.ok, one.first.summary


def verdict(scenario: Scenario, pool: str, slos: list[Slo],
            confidence: Confidence | None, *, give_up: bool = False,
            ran: "sim.Results | None" = None) -> Verdict:
    """The SLO verdict on ``pool`` for ``scenario``: one run with its seed, or replications
    with the seeds after it until the verdict is as sure as ``confidence`` asks
    (``give_up``: a run is ended as soon as an SLO is missed for good, see
    :mod:`sim.planning.hopeless`; ``ran``: the results of ``scenario`` run whole with its
    own seed, already at hand, taken as the first run)."""
    def sample(i: int) -> tuple[dict, Observed]:
        scn = scenario if i == 0 else with_values(scenario, {"seed": scenario.seed + i})
        watch = hopeless_watch(scn, pool, slos) if give_up else None
        res = ran if i == 0 and ran is not None and watch is None else \
            run_trial(scn, watch=(watch.every_s, watch) if watch else None)
        end_s = min(scn.duration, res.summary["end_s"])
        everyone = pool_requests(scn, res.requests, pool, after_warmup=False)
        share = served_share(everyone, scn.warmup, end_s)
        steady = everyone[everyone["arrival_s"] >= scn.warmup]
        measured = measure(steady, slos)
        if watch is not None and watch.missed:      # given up: missed for good
            measured.update({m: (0.0 if m == "attainment" else math.inf)
                             for m in watch.missed})
        return measured, Observed(res.summary, share, bool(watch and watch.missed),
                                  *_speeds(steady, res.summary["end_s"] - scn.warmup))
    return judge(sample, slos, confidence)


def _speeds(requests: pd.DataFrame, window_s: float) -> tuple[float | None, float | None]:
    """Output tokens per second of ``requests`` completed over ``window_s``, and their
    TPOT p50."""
    done = requests[requests["status"].astype(str) == "completed"]
    tpot = done["tpot_s"].dropna()
    return (float(done["output_tokens"].sum() / window_s) if window_s > 0 else None,
            float(tpot.median()) if len(tpot) else None)


def reached(scenario: Scenario, requests: pd.DataFrame) -> set[str]:
    """The pools any request of ``requests`` (a run of ``scenario`` as configured) reaches
    (an idle pool, allowed in a scenario, has nothing to size)."""
    return {pool for pool in scenario.pools
            if len(pool_requests(scenario, requests, pool)) > 0}


IDLE_NOTE = "no request reaches this pool (idle capacity): nothing to size"


def idle_row(scenario: Scenario, pool: str) -> dict:
    """The size table's row for ``pool`` when no request reaches it: its own option at
    the floor its ``sizing.min_replicas`` keeps (kept for redundancy, paid for whether
    or not a request comes), else 0 replicas."""
    option = configured_option(scenario.pools[pool])
    floor = sizing_floor(scenario, pool, default=0)
    price = resolve(scenario)[0].pools[pool].price_per_gpu_hour if floor else 0.0
    note = IDLE_NOTE if not floor else (
        f"no request reaches this pool (idle capacity): kept at its floor "
        f"(sizing.min_replicas: {floor})")
    return {"pool": pool, **option, **option_source(scenario, pool, option),
            "replicas": floor, "gpus": floor * option_gpus(option),
            "feasible": True, "cost_usd_per_h": floor * option_gpus(option) * price,
            "note": note}


def _option_grid(scenario: Scenario, pool: str) -> list[dict]:
    cfg = scenario.pools[pool]
    opts = cfg.sizing
    hardware = (opts.hardware if opts and opts.hardware else [cfg.hardware])
    tps = (opts.tp if opts and opts.tp else [cfg.tp])
    pps = (opts.pp if opts and opts.pp else [cfg.pp])
    dtypes = (opts.weight_dtype if opts and opts.weight_dtype else [cfg.weight_dtype])
    kv_dtypes = (opts.kv_dtype if opts and opts.kv_dtype else [cfg.kv_dtype])
    return [{"hardware": h, "tp": t, "pp": p, "weight_dtype": d, "kv_dtype": k}
            for h, t, p, d, k in itertools.product(hardware, tps, pps, dtypes, kv_dtypes)]


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


# what one sizing option sets of a pool: every one of them named in each row of the size
# table and written by --write-scenario (a field left out would be the pool's own, unseen)
OPTION_FIELDS = ("hardware", "tp", "pp", "weight_dtype", "kv_dtype")


def configured_option(cfg) -> dict:
    """A pool's own option (its hardware, TP, pipeline stages, weight and KV cache
    precisions) as sizing names one."""
    return {k: getattr(cfg, k) for k in OPTION_FIELDS}


def option_source(scenario: Scenario, pool: str, option: dict) -> dict:
    """What a row of ``option`` names besides the option: the pool's serving engine and
    the step-time source its trials read (``cost_model``: roofline, or the measured or
    calibrated profile file, as the run's summary labels it; None where the option does
    not resolve, e.g. the model does not fit)."""
    from sim.config.inputs import scenario_files
    from sim.cost import build_cost_model

    label = None
    try:
        resolved, problems = resolve(with_values(scenario, {f"pools.{pool}.{k}": v
                                                            for k, v in option.items()}))
        if resolved is not None and not problems:
            label = build_cost_model(resolved.pools[pool], scenario_files(scenario)).label
    except (sim.ScenarioError, ValueError):
        pass
    return {"engine": scenario.pools[pool].engine, "cost_model": label}


def option_gpus(option: dict) -> int:
    """GPUs of one replica of ``option``: tp for each of its pp stages."""
    return option["tp"] * option.get("pp", 1)


def option_values(scenario: Scenario, pool: str, option: dict, replicas: int) -> dict:
    """The overrides that give ``pool`` the sizing ``option`` with a fixed ``replicas``: no
    autoscaler, and so no cold start; a spot pool's count is held by a one-row schedule,
    which replaces the replicas preemptions take (a fixed spot pool would lose them for
    good). The option sets exactly its fields (:data:`OPTION_FIELDS`): the KV cache's
    precision is the option's own, never inferred from the weights'."""
    values = {f"pools.{pool}.{k}": v for k, v in option.items()}
    cfg = scenario.pools[pool]
    values[f"pools.{pool}.replicas"] = replicas
    if cfg.spot is not None and cfg.spot.preemptions_per_hour > 0:
        values[f"pools.{pool}.autoscaler"] = {"type": "scheduled",
                                              "table": [{"at": 0, "replicas": replicas}]}
    else:
        values[f"pools.{pool}.autoscaler"] = None
        values[f"pools.{pool}.cold_start"] = type(cfg.cold_start)().model_dump(mode="json")
    return values


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


MAX_SIZING_TRIALS = 2_000                  # simulations one `size` may run, at worst
MAX_SIZING_REPLICA_TRIALS = 2_000_000      # replicas simulated over all of them, at worst


def search_bound(cap: int) -> tuple[int, int]:
    """The most trials, and the most replicas simulated over them, that the search for one
    option may run with ``cap`` replicas at most (doubling from 1, then bisection)."""
    trials, replicas, prev, hi = 0, 0, 0, 1
    while True:                          # doubling: 1, 2, 4, ... up to the cap
        trials, replicas = trials + 1, replicas + hi
        if hi >= cap:
            break
        prev, hi = hi, min(2 * hi, cap)
    span = hi - prev                     # bisection within (prev, hi]
    steps = math.ceil(math.log2(span)) if span > 1 else 0
    return trials + steps, replicas + steps * hi


def check_budget(scenario: Scenario, pools: list[str], *, options: bool = True,
                 confidence: Confidence | None = None) -> None:
    """Refuse, before any simulation, a search whose worst case runs more simulations or
    simulates more replicas than one command should (``options``: over each pool's sizing
    options; else its configuration alone, as `check` sizes it; ``confidence``: each
    trial replicated up to its cap)."""
    trials = replicas = 0
    for pool in pools:
        n_opts = len(_option_grid(scenario, pool)) if options else 1
        t, r = search_bound(replica_cap(scenario, pool))
        trials, replicas = trials + n_opts * t, replicas + n_opts * r
    sized = [p for p in pools if scenario.pools[p].sizing is not None] or pools
    shape = "; ".join(f"{p}: {len(_option_grid(scenario, p)) if options else 1} "
                      f"option(s) x up to "
                      f"{replica_cap(scenario, p):,} replicas" for p in sized)
    refuse_over_budget(scenario, ("pools", sized[0], "sizing"), trials, replicas, shape,
                       "lower sizing.max_replicas, list fewer hardware/tp/pp/weight_dtype "
                       "options, size one pool at a time with --pool", confidence)


# how a search of one pool's counts (joint, autoscaled) is brought within the budget
NARROWER_COUNTS = "lower sizing.max_replicas or raise sizing.min_replicas"


def refuse_over_budget(scenario: Scenario, at: tuple, trials: int, replicas: int,
                       shape: str, remedy: str, confidence: Confidence | None) -> None:
    """Refuse, before any run, a search whose worst case is ``trials`` simulations of
    ``replicas`` replicas in all, each replicated up to ``confidence``'s cap, beyond what
    one `size` may run: the error says what it tries (``shape``) and how to cut it
    (``remedy``), located at the scenario field ``at``."""
    each = confidence.max_replications if confidence is not None else 1
    trials, replicas = trials * each, replicas * each
    if trials <= MAX_SIZING_TRIALS and replicas <= MAX_SIZING_REPLICA_TRIALS:
        return
    raise sim.ScenarioError(
        f"this search may run {trials:,} simulations of up to {replicas:,} replicas in all "
        f"({shape}); the most one `size` runs is {MAX_SIZING_TRIALS:,} simulations and "
        f"{MAX_SIZING_REPLICA_TRIALS:,} replicas: {remedy}"
        + (", or cap the replications lower (--max-replications)" if each > 1 else ""),
        **located(scenario, at))


def sizing_field(scenario: Scenario, pool: str) -> tuple:
    """Where a pool's sizing error points: its ``sizing:`` block, else the pool."""
    return ("pools", pool, "sizing") if scenario.pools[pool].sizing else ("pools", pool)


def sizing_floor(scenario: Scenario, pool: str, default: int = 1) -> int:
    """The fewest replicas size may choose for ``pool``: its ``sizing.min_replicas``,
    else ``default``."""
    cfg = scenario.pools[pool]
    given = cfg.sizing.min_replicas if cfg.sizing else None
    return default if given is None else given


def bisection_steps(low: int, cap: int) -> int:
    """The most trials a bisection for the fewest replicas in [low, cap] runs, with its
    two ends (for a search's worst case against the budget)."""
    return 2 + max(0, math.ceil(math.log2(max(1, cap - low))))


def replica_cap(scenario: Scenario, pool: str) -> int:
    """The most replicas of ``pool`` to try: its sizing's bound (checked with the scenario
    against the fleet's), else 64 or what the other pools leave of the fleet's bound."""
    cfg = scenario.pools[pool]
    if cfg.sizing:
        return cfg.sizing.max_replicas
    others = sum(most_replicas(p) for name, p in scenario.pools.items() if name != pool)
    return max(1, min(64, MAX_FLEET_REPLICAS - others))


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
    grids = {pool: _option_grid(scenario, pool) for pool in pools}
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
        table = _by_cost(table, "pool", "feasible")
    return table.reset_index(drop=True)


def _by_cost(table: pd.DataFrame, *first: str) -> pd.DataFrame:
    """``table`` cheapest first per hour (after ``first``: pool, feasible rows first), and
    at the same price the widest SLO margin first: of two fleets costing the same, the one
    with more headroom (an fp8 option's faster steps on the same GPUs) is the answer."""
    keys = [*first, "cost_usd_per_h"] + (["slo_margin_min"] if "slo_margin_min" in table
                                         else [])
    ascending = [k != "feasible" for k in first] + [True, False][:len(keys) - len(first)]
    return table.sort_values(keys, ascending=ascending, kind="stable", na_position="last")


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


def chosen_rows(table: pd.DataFrame) -> dict[str, pd.Series]:
    """Each pool's answer in a size table: the row of its cheapest feasible option (a
    pool with none is left out)."""
    chosen = {}
    for pool, rows in table.groupby("pool", sort=False):
        feasible = rows[rows["feasible"].astype(bool) & rows["replicas"].notna()]
        if len(feasible):
            chosen[str(pool)] = _by_cost(feasible).iloc[0]
    return chosen


def chosen_options(table: pd.DataFrame) -> dict[str, dict]:
    """Each pool's answer in a size table: its cheapest feasible option and count (a pool
    with none is left out)."""
    return {pool: {"hardware": row["hardware"], "tp": int(row["tp"]),
                   "pp": int(row.get("pp", 1)), "weight_dtype": row["weight_dtype"],
                   "kv_dtype": row["kv_dtype"], "replicas": int(row["replicas"])}
            for pool, row in chosen_rows(table).items()}


def sized_fleet(scenario: Scenario, table: pd.DataFrame) -> Scenario | None:
    """The scenario with every pool sized as ``table`` answers, each set as its trials
    ran it (:func:`option_values`; idle pools at 0 replicas stay as configured); None
    when no pool has an answer."""
    chosen = {p: c for p, c in chosen_options(table).items() if c["replicas"] > 0}
    if not chosen:
        return None
    values = {}
    for pool, c in chosen.items():
        option = {k: c[k] for k in OPTION_FIELDS}
        values.update(option_values(scenario, pool, option, c["replicas"]))
    return with_values(scenario, values)


def chosen_fleet(scenario: Scenario, table: pd.DataFrame) -> tuple[Scenario, dict] | None:
    """:func:`sized_fleet` run once with its seed: (that scenario, its summary); None
    when no pool has an answer."""
    fleet = sized_fleet(scenario, table)
    return None if fleet is None else (fleet, sim.run(fleet).summary)


def chosen_line(pool: str, row) -> str:
    """One line naming a pool's answer: count, hardware, TP, PP, both precisions, engine
    and step-time source (the size table's row ``row``)."""
    return (f"pool {pool}: {int(row['replicas'])} x {row['hardware']} tp{int(row['tp'])} "
            f"pp{int(row.get('pp', 1))}, {row['weight_dtype']} weights, {row['kv_dtype']} "
            f"KV cache, engine {row.get('engine')}, step times from {row.get('cost_model')}")
