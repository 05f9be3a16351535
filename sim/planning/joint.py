"""`fleetsim size --joint A,B`: two coupled pools sized together, the SLOs judged over
every request that passes through either.

Two pools are coupled when one served model routes through both: a disaggregated
model's prefill and decode pools, a cascade's first and second pools, or a split by
prompt length. Sizing them one at a time asks each to meet the SLOs alone, with the other
as configured; here the question is the cheapest pair of counts (a, b) meeting them
together, each pool at its configured hardware, TP and precision, autoscaling replaced by
the fixed counts; each count starts at the pool's ``sizing.min_replicas`` (default 1).

The search is a staircase over the monotone frontier, not the whole grid: more replicas
of either pool never hurt, so the fewest B meeting the SLOs with a+1 A replicas is at
most the fewest with a. For a = 1, 2, ... (from A's ``sizing.min_replicas``) it finds
that fewest B by bisection below the last one, and stops once a's replicas alone (with
the fewest of B) cost no less than the cheapest pair found. The cost of a pair is known without simulating it (counts x TP x
price per GPU-hour), so the answer is the grid's cheapest pair, as an exhaustive search
finds it, ties going to the fewer A replicas.

A prompt-length split couples its pools through its threshold too: a higher threshold
sends more prompts to the short pool. ``--thresholds`` runs the staircase for each
threshold given and answers with the cheapest pair of any.
"""
from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from sim.config.errors import ScenarioError
from sim.config.resolve import resolve
from sim.config.scenario import Scenario
from sim.config.slos import Slo
from sim.config.overrides import with_values
from sim.planning.progress import TrialCounter
from sim.planning.budget import (NARROWER_COUNTS, bisection_steps, refuse_over_budget,
                                 replica_cap, sizing_field, sizing_floor)
from sim.planning.chosen import chosen_line
from sim.planning.options import configured_option, option_source, option_values
from sim.planning.size import fewest
from sim.planning.trial import verdict
from sim.planning.verdict import Confidence, Verdict


def coupling(scenario: Scenario, a: str, b: str) -> str | None:
    """How ``a`` and ``b`` are coupled (a served model routing through both), or None."""
    for name, served in scenario.gateway.models.items():
        if served.disaggregated is not None and \
                {served.disaggregated.prefill, served.disaggregated.decode} == {a, b}:
            return f"disaggregated model {name}"
        if served.cascade is not None and {served.cascade.first, served.cascade.then} == {a, b}:
            return f"cascade {name}"
        split = served.by_prompt_length
        if split is not None and {split.short, split.long} == {a, b}:
            return f"prompt-length split {name}"
    return None


def check_pair(scenario: Scenario, pools: list[str]) -> tuple[str, str]:
    """The two pools ``--joint`` names, refused unless they are two known, coupled pools."""
    if len(pools) != 2 or pools[0] == pools[1]:
        raise ScenarioError("--joint takes two different pools, e.g. --joint prefill,decode",
                            field="--joint")
    for p in pools:
        if p not in scenario.pools:
            raise ScenarioError(f"unknown pool '{p}'; pools: {', '.join(scenario.pools)}",
                                field="--joint")
    a, b = pools
    if coupling(scenario, a, b) is None:
        raise ScenarioError(
            f"pools {a} and {b} are not coupled: no served model routes through both. "
            "--joint sizes a disaggregated model's prefill and decode pools, a cascade's "
            "two pools or a prompt-length split's; size other pools one at a time",
            field="--joint")
    return a, b


def pair_cost_per_h(scenario: Scenario, a: str, b: str) -> Callable[[int, int], float]:
    """USD per hour of ``na`` replicas of ``a`` and ``nb`` of ``b`` (fixed counts)."""
    resolved, _ = resolve(scenario)
    rate = {p: resolved.pools[p].price_per_gpu_hour * resolved.pools[p].gpus_per_replica
            for p in (a, b)}
    return lambda na, nb: na * rate[a] + nb * rate[b]


def _values(scenario: Scenario, pool: str, n: int) -> dict:
    return option_values(scenario, pool, configured_option(scenario.pools[pool]), n)


def split_routes(scenario: Scenario, a: str, b: str) -> list[str]:
    """The served models whose prompt-length split routes between ``a`` and ``b``."""
    return [name for name, served in scenario.gateway.models.items()
            if served.by_prompt_length is not None
            and {served.by_prompt_length.short, served.by_prompt_length.long} == {a, b}]


def threshold_field(name: str) -> str:
    return f"gateway.models.{name}.by_prompt_length.threshold_tokens"


def check_thresholds(scenario: Scenario, pools: list[str], thresholds: list[int]) -> str:
    """The served model whose split threshold ``--thresholds`` tries, refused (before any
    run) unless the two pools are one prompt-length split's and every threshold is one
    the scenario takes."""
    a, b = check_pair(scenario, pools)
    names = split_routes(scenario, a, b)
    if not names:
        raise ScenarioError(
            f"--thresholds tries prompt-length thresholds, and pools {a} and {b} are "
            f"coupled as a {coupling(scenario, a, b)}, not by a prompt-length split "
            "(gateway.models.NAME.by_prompt_length)", field="--thresholds")
    if len(names) > 1:
        raise ScenarioError(
            f"--thresholds: served models {', '.join(names)} each split prompts between "
            f"pools {a} and {b}, and one threshold is tried at a time: give them one "
            "served model, or size them with their thresholds as configured",
            field="--thresholds")
    if len(set(thresholds)) != len(thresholds):
        raise ScenarioError("--thresholds lists a threshold twice: give each once",
                            field="--thresholds")
    for threshold in thresholds:
        try:
            _, problems = resolve(with_values(scenario, {threshold_field(names[0]):
                                                         threshold}))
        except ScenarioError as exc:
            problems = [((), exc.message)]
        if problems:
            raise ScenarioError(f"--thresholds: {threshold:,} tokens: {problems[0][1]}",
                                field="--thresholds")
    return names[0]


def staircase_trials(scenario: Scenario, a: str, b: str) -> int:
    """The most trials one staircase search may run: every count of ``a`` from its floor
    to its cap, each with a bisection over ``b``'s."""
    return (replica_cap(scenario, a) - sizing_floor(scenario, a) + 1) * \
        bisection_steps(sizing_floor(scenario, b), replica_cap(scenario, b))


def check_joint_budget(scenario: Scenario, a: str, b: str, thresholds: int,
                       confidence: Confidence | None) -> None:
    """Refuse, before any run, a joint search whose worst case (every count of ``a``,
    each with a bisection over ``b``'s, at each threshold, each trial replicated up to
    the cap) runs more than one `size` may."""
    low_a, low_b = sizing_floor(scenario, a), sizing_floor(scenario, b)
    cap_a, cap_b = replica_cap(scenario, a), replica_cap(scenario, b)
    trials = thresholds * staircase_trials(scenario, a, b)
    refuse_over_budget(scenario, sizing_field(scenario, a), trials, trials * (cap_a + cap_b),
                       f"{thresholds} threshold(s) x {cap_a - low_a + 1:,} counts of {a} x a "
                       f"search over {low_b:,}..{cap_b:,} replicas of {b}", NARROWER_COUNTS,
                       confidence)


def joint_size(scenario: Scenario, pools: list[str], slos: list[Slo], *,
               confidence: Confidence | None = None,
               counter: TrialCounter | None = None,
               thresholds: list[int] | None = None) -> pd.DataFrame:
    """One row per count of the first pool tried: the fewest of the second meeting the
    SLOs with it (None when none within the cap), the pair's cost per hour, the SLO
    figures of that pair and whether it is the answer (``chosen``). ``thresholds``
    (a prompt-length split's pools only): the staircase for each threshold in turn, its
    rows marked with ``threshold_tokens``, and the answer the cheapest pair of any
    (ties to the earlier threshold listed). ``counter`` is told of each trial as it
    starts, with the most the search may still run (as :func:`check_joint_budget`
    counts them)."""
    a, b = check_pair(scenario, pools)
    name = check_thresholds(scenario, pools, thresholds) if thresholds else None
    check_joint_budget(scenario, a, b, len(thresholds or [None]), confidence)
    cost = pair_cost_per_h(scenario, a, b)
    if not thresholds:
        rows, best, runs = _staircase(scenario, a, b, slos, cost, confidence, counter)
        table = pd.DataFrame(rows)
        table["chosen"] = [best is not None and (r[a], r[b]) == best for r in rows]
        table["simulations"] = runs
        return _named(scenario, (a, b), table)
    field = threshold_field(name)
    rows, best, runs = [], None, 0
    staircase = staircase_trials(scenario, a, b)
    for i, threshold in enumerate(thresholds):
        scn = with_values(scenario, {field: threshold})
        if counter is not None:
            counter.most_after = (len(thresholds) - i - 1) * staircase
        these, pair, n = _staircase(scn, a, b, slos, cost, confidence, counter)
        rows += [{"threshold_tokens": threshold, **r} for r in these]
        runs += n
        if pair is not None and (best is None or cost(*pair) < cost(*best[1])):
            best = (threshold, pair)
    table = pd.DataFrame(rows)
    table["chosen"] = [best is not None and (r["threshold_tokens"], (r[a], r[b])) == best
                       for r in rows]
    table["simulations"] = runs
    return _named(scenario, (a, b), table)


def option_of(scenario: Scenario, pool: str) -> str:
    """A pool's configuration as a joint row names it: hardware, TP, PP, weight/KV
    precisions, engine and step-time source."""
    option = configured_option(scenario.pools[pool])
    source = option_source(scenario, pool, option)
    return (f"{option['hardware']} tp{option['tp']} pp{option['pp']} "
            f"{option['weight_dtype']}/{option['kv_dtype']}, engine {source['engine']}, "
            f"{source['cost_model']}")


def _named(scenario: Scenario, pools: tuple[str, str], table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with a column a pool (``option_POOL``) naming its configuration in full
    (every row the same: a joint search varies the counts alone)."""
    for pool in pools:
        table[f"option_{pool}"] = option_of(scenario, pool)
    return table


def _staircase(scenario: Scenario, a: str, b: str, slos: list[Slo],
               cost: Callable[[int, int], float], confidence: Confidence | None,
               counter: TrialCounter | None
               ) -> tuple[list[dict], tuple[int, int] | None, int]:
    """The rows of the staircase search (module docstring), the cheapest pair (None when
    none meets the SLOs) and the simulations run (``counter``: told of each trial as it
    starts)."""
    cap_a, cap_b = replica_cap(scenario, a), replica_cap(scenario, b)
    trials: dict[tuple[int, int], Verdict] = {}
    low_a, low_b = sizing_floor(scenario, a), sizing_floor(scenario, b)
    steps = bisection_steps(low_b, cap_b)

    def meets(na: int, nb: int) -> bool:
        if (na, nb) not in trials:
            if counter is not None:
                here = sum(1 for k in trials if k[0] == na)
                counter.start(f"pools {a} x{na} and {b} x{nb}",
                              steps - here + (cap_a - na) * steps)
            scn = with_values(scenario, {**_values(scenario, a, na), **_values(scenario, b, nb)})
            trials[(na, nb)] = verdict(scn, (a, b), slos, confidence)
        return trials[(na, nb)].ok

    rows, best, top = [], None, cap_b
    for na in range(low_a, cap_a + 1):
        if best is not None and cost(na, low_b) >= cost(*best):
            break                               # a's replicas alone cost the best pair
        if not meets(na, top):
            rows.append({a: na, b: None, "cost_usd_per_h": None, "feasible": False})
            continue
        hi = fewest(low_b, top, lambda nb: meets(na, nb))
        top = hi
        if best is None or cost(na, hi) < cost(*best):
            best = (na, hi)
        rows.append({a: na, b: hi, "cost_usd_per_h": cost(na, hi), "feasible": True,
                     **trials[(na, hi)].estimate})
    return rows, best, sum(v.replications for v in trials.values())


def joint_fleet(scenario: Scenario, pools: list[str], table: pd.DataFrame
                ) -> tuple[Scenario | None, list[str]]:
    """``scenario`` with the pair of counts ``table`` chose (each pool fixed at its count,
    as its trials ran it, and a split's threshold where one was tried), and a line a pool
    naming it in full; None where no pair meets the SLOs."""
    chosen = table[table["chosen"].astype(bool)]
    if not len(chosen):
        return None, []
    row, (a, b) = chosen.iloc[0], pools
    values = {**_values(scenario, a, int(row[a])), **_values(scenario, b, int(row[b]))}
    lines = []
    for pool in (a, b):
        option = configured_option(scenario.pools[pool])
        lines.append(chosen_line(pool, {**option, **option_source(scenario, pool, option),
                                        "replicas": int(row[pool])}))
    if "threshold_tokens" in chosen.columns:
        values[threshold_field(split_routes(scenario, a, b)[0])] = int(row["threshold_tokens"])
        lines.append(f"prompt-length threshold {int(row['threshold_tokens']):,} tokens")
    return with_values(scenario, values), lines
