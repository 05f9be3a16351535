"""How far a sizing search may go: the replicas it tries for a pool, and its worst case
in simulations and replicas against what one `size` may run (refused before any run)."""
from __future__ import annotations

import math

import sim
from sim.api import located
from sim.config.sanity import MAX_FLEET_REPLICAS, most_replicas
from sim.config.scenario import Scenario
from sim.planning.options import option_grid
from sim.planning.verdict import Confidence


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
        n_opts = len(option_grid(scenario, pool)) if options else 1
        t, r = search_bound(replica_cap(scenario, pool))
        trials, replicas = trials + n_opts * t, replicas + n_opts * r
    sized = [p for p in pools if scenario.pools[p].sizing is not None] or pools
    shape = "; ".join(f"{p}: {len(option_grid(scenario, p)) if options else 1} "
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
