"""`fleetsim size --autoscaled`: a target-tracking autoscaler sized for a time-varying
load: the target and the most replicas that keep the SLOs over the whole run at the
lowest cost, with that fleet's cost per day and per team.

For each target tried (the configured one scaled by :data:`TARGET_SCALES`: a lower
target starts replicas sooner, buying latency with cost), two bisections, each asked
first at its low end (where most end): the lowest floor ``min_replicas`` meeting the
SLOs with the bound at the cap (a higher floor never hurts the SLOs: it keeps replicas
warm through a trough, so a burst does not wait out a cold start; a lower one costs less
through every trough), from the pool's ``sizing.min_replicas`` (where not given: 0 for a
pool configured to scale to zero, else 1), then the fewest ``max_replicas`` with that
floor (a higher bound never hurts: the autoscaler only uses it when the load asks). Each
run starts with the configured replicas held within its floor and bound; every other
setting as configured. The SLOs are judged over the whole run (after the warm-up), cold starts
and scale-downs included; each run's cost is what the replicas it held were billed. The
answer is the cheapest feasible row.
"""
from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from sim.config.errors import ScenarioError
from sim.config.scenario import Scenario
from sim.config.slos import Slo
from sim.output.slo import margins
from sim.config.overrides import with_values
from sim.planning.progress import TrialCounter
from sim.planning.runner import (map_tasks, scenario_from_payload, scenario_payload,
                                 side_by_side)
from sim.planning.budget import (NARROWER_COUNTS, bisection_steps, refuse_over_budget,
                                 replica_cap, sizing_field, sizing_floor)
from sim.planning.options import configured_option, option_source
from sim.planning.size import fewest
from sim.planning.trial import verdict
from sim.planning.verdict import Confidence, Verdict

TARGET_SCALES = (0.5, 0.75, 1.0, 1.5, 2.0)
HOURS_PER_DAY = 24.0


def target_autoscaler(scenario: Scenario, pool: str):
    """The pool's target-tracking autoscaler, refused (naming the pool) without one."""
    scaler = scenario.pools[pool].autoscaler
    if scaler is None or not scaler.sized_by_target:
        raise ScenarioError(
            f"pool {pool} has no target-tracking autoscaler (autoscaler: {{type: target, "
            "metric: ..., target: ..., max_replicas: ...}}): --autoscaled sizes its "
            "target and bounds; size a fixed pool without --autoscaled",
            field="--autoscaled")
    return scaler


def targets_tried(scaler) -> list[float]:
    """The targets tried: the configured one times each of :data:`TARGET_SCALES` (a KV
    use target stays at most 1)."""
    tried = [scaler.target * s for s in TARGET_SCALES]
    if scaler.metric == "kv_util":
        tried = [min(t, 1.0) for t in tried]
    return list(dict.fromkeys(tried))


def lowest_floor(scenario: Scenario, pool: str) -> int:
    """The lowest ``min_replicas`` tried: the pool's ``sizing.min_replicas`` where given,
    else 0 for a pool configured to scale to zero and 1 for any other."""
    to_zero = scenario.pools[pool].autoscaler.min_replicas == 0
    return sizing_floor(scenario, pool, default=0 if to_zero else 1)


def bounds_values(scenario: Scenario, pool: str, target: float, floor: int,
                  bound: int) -> dict:
    """The overrides of one trial: the target, the floor and the bound; the run starts
    with the configured replicas held within [floor, bound] (at least one), and a floor
    above 0 drops a scale-to-zero grace (it applies only at floor 0)."""
    cfg = scenario.pools[pool]
    values = {f"pools.{pool}.autoscaler.target": target,
              f"pools.{pool}.autoscaler.min_replicas": floor,
              f"pools.{pool}.autoscaler.max_replicas": bound,
              f"pools.{pool}.replicas": max(1, min(max(cfg.replicas, floor), bound))}
    if floor > 0:
        grace = type(cfg.autoscaler).model_fields["scale_to_zero_grace"].default
        values[f"pools.{pool}.autoscaler.scale_to_zero_grace"] = grace
    return values


def search_plan(scenario: Scenario, pool: str, confidence: Confidence | None
                ) -> tuple[list[float], int, int]:
    """The targets an autoscaled search of ``pool`` tries and the [floor, cap] it searches,
    refused before any run without a target-tracking autoscaler or past the budget."""
    tried = targets_tried(target_autoscaler(scenario, pool))
    low = lowest_floor(scenario, pool)
    cap = max(low, 1, replica_cap(scenario, pool))
    check_autoscaled_budget(scenario, pool, len(tried), low, cap, confidence)
    return tried, low, cap


def autoscaled_trials(targets: int, low: int, cap: int) -> int:
    """The most trials an autoscaled search may run: per target, two bisections over
    [low, cap] (the floor's, then the bound's)."""
    return targets * 2 * bisection_steps(low, cap)


def check_autoscaled_budget(scenario: Scenario, pool: str, targets: int, low: int,
                            cap: int, confidence: Confidence | None) -> None:
    """Refuse, before any run, a search whose worst case (per target, two bisections over
    [low, cap], each replicated up to the cap) runs more simulations or simulates more
    replicas than one `size` may."""
    trials = autoscaled_trials(targets, low, cap)
    refuse_over_budget(scenario, sizing_field(scenario, pool), trials, trials * cap,
                       f"{targets} targets x two searches over {low:,}..{cap:,} replicas",
                       NARROWER_COUNTS, confidence)


def _row(pool: str, target: float, floor: int | None, bound: int | None,
         trial: Verdict | None, slos: list[Slo], named: dict) -> dict:
    row = {"pool": pool, **named, "target": target, "min_replicas": floor,
           "max_replicas": bound, "feasible": bound is not None}
    if trial is None or bound is None:
        return row
    summary = trial.first.summary
    hours = summary["end_s"] / 3600.0
    figures = summary["pools"][pool]
    margin = margins(trial.estimate, slos)
    return {**row, "replicas_mean": figures["replicas_mean"],
            "replicas_max": figures["replicas_max"],
            "cost_usd_per_h": figures["cost_usd"] / hours,
            "cost_usd_per_day": figures["cost_usd"] / hours * HOURS_PER_DAY,
            **trial.estimate, **{f"margin_{k}": v for k, v in margin.items()}}


def _search_target(scenario: Scenario, pool: str, slos: list[Slo], target: float,
                   low: int, cap: int, confidence: Confidence | None,
                   counter: TrialCounter | None = None, after: int = 0
                   ) -> tuple[dict, int, dict | None]:
    """One target's two bisections: its row, the simulations they ran, and the summary of
    its row's trial when feasible. A trial is given up as soon as an SLO is missed for
    good (:mod:`sim.planning.hopeless`): only its verdict is used."""
    trials: dict[tuple[int, int], Verdict] = {}
    per_target = autoscaled_trials(1, low, cap)
    option = configured_option(scenario.pools[pool])    # each row names the pool in full
    named = {**option, **option_source(scenario, pool, option)}

    def meets(floor: int, bound: int) -> bool:
        if (floor, bound) not in trials:
            if counter is not None:
                counter.start(f"pool {pool} autoscaler target {target:g}, "
                              f"min_replicas {floor}, max_replicas {bound}",
                              per_target - len(trials) + after)
            scn = with_values(scenario, bounds_values(scenario, pool, target, floor, bound))
            trials[(floor, bound)] = verdict(scn, pool, slos, confidence, give_up=True)
        return trials[(floor, bound)].ok

    floor = _lowest(low, cap, lambda f: meets(f, cap))
    bound = None if floor is None else _lowest(max(floor, 1), cap, lambda m: meets(floor, m))
    runs = sum(v.replications for v in trials.values())
    shown = trials.get((floor, bound), trials[(low, cap)])
    row = _row(pool, target, floor, bound, shown, slos, named)
    return row, runs, (shown.first.summary if bound is not None else None)


def _target_task(payload) -> tuple[dict, int, dict | None]:
    """A worker's share: one target's search (module level, for worker processes)."""
    scenario_data, pool, slos, target, low, cap, confidence = payload
    return _search_target(scenario_from_payload(scenario_data), pool, slos, target, low,
                          cap, confidence)


def autoscaled_size(scenario: Scenario, pool: str, slos: list[Slo], *,
                    confidence: Confidence | None = None,
                    counter: TrialCounter | None = None, executor: str = "local",
                    workers: int = 1, scheduler: str | None = None,
                    ended: Callable[[int, int], None] | None = None
                    ) -> tuple[pd.DataFrame, dict | None]:
    """One row per target tried (its lowest floor and fewest ``max_replicas`` meeting the
    SLOs, the run's replicas and cost per hour and per day, the SLO figures; ``chosen``
    marks the cheapest feasible), and the chosen row's cost per day by team (None when no
    target meets the SLOs within the cap). ``counter`` is told of each trial as it
    starts, with the most the search may still run (two bisections a target, as
    :func:`check_autoscaled_budget` counts them). With ``workers`` processes (or on Dask,
    ``executor``) the targets are searched side by side (``ended``: told as each ends);
    each target's search is the same wherever it runs, so the table is too."""
    tried, low, cap = search_plan(scenario, pool, confidence)
    per_target = autoscaled_trials(1, low, cap)
    if side_by_side(executor, workers, len(tried)):
        payload = scenario_payload(scenario)
        found = map_tasks(_target_task, [(payload, pool, slos, t, low, cap, confidence)
                                         for t in tried],
                          executor=executor, workers=workers, scheduler=scheduler,
                          progress=ended)
    else:
        found = [_search_target(scenario, pool, slos, target, low, cap, confidence, counter,
                                (len(tried) - i - 1) * per_target)
                 for i, target in enumerate(tried)]
    rows = [row for row, _, _ in found]
    runs = sum(n for _, n, _ in found)
    chosen_summary = {i: summary for i, (_, _, summary) in enumerate(found)
                      if summary is not None}
    table = pd.DataFrame(rows)
    table["chosen"] = False
    feasible = table[table["feasible"]]
    teams = None
    if len(feasible):
        best = feasible.sort_values(["cost_usd_per_h", "max_replicas", "min_replicas"],
                                    kind="stable").index[0]
        table.loc[best, "chosen"] = True
        summary = chosen_summary[best]
        hours = summary["end_s"] / 3600.0
        teams = {name: t["cost_usd"] / hours * HOURS_PER_DAY
                 for name, t in summary["teams"].items()}
    table["simulations"] = runs
    return table, teams


def _lowest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The least n in [lo, hi] with ``ok(n)`` (``ok`` taken as monotone: true from some n
    on), or None when ``ok(hi)`` is false. ``ok(lo)`` is asked first: most searches end
    there."""
    if ok(lo):
        return lo
    if not ok(hi):
        return None
    return fewest(lo + 1, hi, ok)


def autoscaled_fleet(scenario: Scenario, table: pd.DataFrame
                     ) -> tuple[Scenario | None, list[str]]:
    """``scenario`` with each pool's autoscaler as its ``chosen`` row of ``table`` sets it
    (the target, floor and bound, as its trials ran them: :func:`bounds_values`), and a
    line a pool naming it in full; None where no pool has a chosen row."""
    values, lines = {}, []
    for _, row in table[table["chosen"].astype(bool)].iterrows():
        pool, floor, bound = str(row["pool"]), int(row["min_replicas"]), \
            int(row["max_replicas"])
        values.update(bounds_values(scenario, pool, float(row["target"]), floor, bound))
        cfg = scenario.pools[pool]
        lines.append(f"pool {pool}: autoscaler target {row['target']:g} "
                     f"({cfg.autoscaler.metric}), min_replicas {floor}, max_replicas "
                     f"{bound}; {cfg.hardware} tp{cfg.tp} pp{cfg.pp}, {cfg.weight_dtype} "
                     f"weights, {cfg.kv_dtype} KV cache, engine {cfg.engine}")
    return (with_values(scenario, values) if values else None), lines
