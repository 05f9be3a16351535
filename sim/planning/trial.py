"""One trial of a sizing search: a scenario run at one size, what it observed of a pool
(its requests, the share it served, the pools reached) and its verdict against the SLOs."""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

import sim
from sim.config.resolve import resolve
from sim.config.scenario import Scenario
from sim.config.slos import Slo
from sim.output.slo import measure
from sim.planning.budget import sizing_floor
from sim.planning.hopeless import hopeless_watch
from sim.planning.options import configured_option, option_gpus, option_source
from sim.config.overrides import with_values
from sim.planning.progress import run_trial
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
