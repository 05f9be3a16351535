"""Properties every run must have, whatever the (small, valid) scenario.

Hypothesis builds random scenarios as the dicts a YAML file would give: one
or two pools of Llama-3.1-8B on H100s with any scheduler, router, optional
autoscaler and small KV caches (so requests are preempted and rejected), one
to three streams with optional shared prefixes and retries, and a gateway
with team limits on or off. After each run the request table, the engine
steps, the time series and the summary are checked against each other.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import sim
from sim.config.resolve import resolve
from sim.config.scenario import Scenario
from sim.output.results import collect
from sim.core.checks import RunRefused
from sim.core.simulation import run_resolved

MODEL = "llama-3.1-8b"
SERVED = "llama-3.1-8b@1"
ROUTERS = ["round_robin", "least_outstanding", "least_kv", "power_of_two", "prefix_affinity",
           "longest_prefix"]
SCHEDULERS = ["single", "static", "continuous"]
TEAMS = ["alpha", "beta", "gamma"]
STATUSES = {"completed", "rejected", "unfinished"}
REL = 1e-9


# -- strategies ------------------------------------------------------------------------------

def lengths(max_value: int):
    """A length distribution in any of its YAML forms, bounded by ``max_value``."""
    small = st.one_of(st.sampled_from([max_value // 2, max_value, max_value // 8]),
                      st.integers(1, max_value))
    return st.one_of(
        small,
        small.map(lambda v: {"type": "fixed", "value": v}),
        st.tuples(small, small).map(lambda t: {"type": "uniform", "low": min(t), "high": max(t)}),
        # (a mean of 3 or more: the median stays above the least length, 1, at cv 2)
        st.builds(lambda m, cv: {"type": "lognormal", "mean": m, "cv": cv, "max": max_value},
                  st.integers(3, max_value), st.sampled_from([0.3, 1.0, 2.0])),
        st.builds(lambda m: {"type": "exponential", "mean": m, "max": max_value},
                  st.integers(1, max_value)),
    )


@st.composite
def schedulers(draw, kind: str):
    if kind == "single":
        return {"type": "single"}
    if kind == "static":
        return {"type": "static", "batch_size": draw(st.integers(1, 8)),
                "batch_timeout": draw(st.sampled_from([0, 0.05, 0.5]))}
    cfg = {"type": "continuous",
           "max_num_batched_tokens": draw(st.sampled_from([64, 256, 1024, 4096])),
           "max_num_seqs": draw(st.integers(1, 32)),
           "chunked_prefill": draw(st.booleans()),
           "policy": draw(st.sampled_from(["fcfs", "priority"])),
           "exact_steps": draw(st.booleans()),
           "prefill_only_steps": draw(st.booleans())}
    caps = [c for c in (16, 128, 512) if c < cfg["max_num_batched_tokens"]]
    if cfg["chunked_prefill"] and draw(st.booleans()):
        cfg["long_prefill_token_threshold"] = draw(st.sampled_from(caps))
    if cfg["policy"] == "priority" and draw(st.booleans()):
        cfg["priority_aging"] = draw(st.sampled_from([0.5, 5.0]))
    return cfg


@st.composite
def autoscalers(draw):
    metric = draw(st.sampled_from(["queue_per_replica", "inflight_per_replica", "kv_util",
                                   "ttft_p95"]))
    target = {"kv_util": 0.5, "ttft_p95": 0.5}.get(metric, draw(st.sampled_from([1, 4])))
    lo = draw(st.integers(0, 1))
    cfg = {"type": "target", "metric": metric, "target": target, "min_replicas": lo,
           "max_replicas": draw(st.integers(max(lo, 1), 3)), "stable_window": 4,
           "panic_window": 1, "tick": 0.5, "scale_down_cooldown": 2}
    if lo == 0:             # the grace applies only to a pool that may scale to zero
        cfg["scale_to_zero_grace"] = 1
    return cfg


@st.composite
def pools(draw, kind: str):
    pool = {"model": MODEL, "hardware": "H100-SXM", "replicas": draw(st.integers(1, 3)),
            "scheduler": draw(schedulers(kind)),
            "router": {"type": draw(st.sampled_from(ROUTERS))},
            "prefix_caching": draw(st.sampled_from([True, False]))}
    kv = draw(st.sampled_from(["96MB", "64MB", "160MB", None]))
    if kv is not None:
        pool["kv_cache_bytes"] = kv             # 2 MiB blocks: 30 to 76 of them (16 tokens each)
    if draw(st.booleans()):
        pool["autoscaler"] = draw(autoscalers())
        pool["cold_start"] = {"provisioning": draw(st.sampled_from([0, 0.5, 2])),
                              "load_bandwidth": "100GB/s"}
    queue = {}
    if draw(st.booleans()):
        queue["capacity"] = draw(st.integers(1, 30))
    if draw(st.booleans()):
        queue["fair"] = True
    # (capacity and fairness act where requests wait in the pool: with an autoscaler, or
    # a limit on what each replica holds)
    if draw(st.booleans()) or (queue and "autoscaler" not in pool):
        queue["max_outstanding_per_replica"] = draw(st.integers(1, 8))
    if queue:
        pool["queue"] = queue
    return pool


@st.composite
def streams(draw, pool_names: list[str], served: bool):
    rate = draw(st.sampled_from([25, 8, 60, 1]))
    arrival = draw(st.sampled_from([
        {"type": "poisson", "rate": rate},
        {"type": "gamma", "rate": rate, "cv": 3},
        {"type": "poisson", "rate": {"type": "piecewise", "points": [[0, rate], [3, 0], [6, rate]]}},
    ]))
    stream = {"team": draw(st.sampled_from(TEAMS)), "arrival": arrival,
              "prompt_tokens": draw(lengths(400)), "output_tokens": draw(lengths(200)),
              "priority": draw(st.integers(0, 3))}
    if served:
        stream["model"] = SERVED
    elif len(pool_names) == 1:
        stream["model"] = MODEL
    else:
        stream["pool"] = draw(st.sampled_from(pool_names))
    if not draw(st.booleans()):
        stream["prefix"] = {"tokens": draw(st.sampled_from([100, 16, 200])),
                            "groups": draw(st.integers(1, 3))}
    if not draw(st.booleans()):
        stream["retry"] = {"max_attempts": draw(st.integers(1, 3)), "base": 0.2,
                           "max_delay": 2}
    return stream


@st.composite
def teams(draw):
    out = {}
    for team in draw(st.lists(st.sampled_from(TEAMS), min_size=1, max_size=3, unique=True)):
        limits = {}
        if draw(st.booleans()):
            limits["requests_per_min"] = draw(st.sampled_from([30, 300]))
        if draw(st.booleans()):
            limits["tokens_per_min"] = draw(st.sampled_from([20_000, 200_000]))
        if draw(st.booleans()):
            limits["max_concurrency"] = draw(st.integers(1, 8))
        if draw(st.booleans()):
            limits["max_priority"] = draw(st.integers(0, 2))
        if draw(st.booleans()):
            limits["weight"] = draw(st.sampled_from([0.5, 2.0]))
        out[team] = limits
    return out


@st.composite
def scenarios(draw, kind: str):
    """A small valid scenario dict whose first pool uses scheduler ``kind``."""
    n_pools = draw(st.integers(1, 2))
    names = [f"p{i}" for i in range(n_pools)]
    pool_cfgs = {names[0]: draw(pools(kind))}
    for name in names[1:]:
        pool_cfgs[name] = draw(pools(draw(st.sampled_from(SCHEDULERS))))
    served = draw(st.booleans())
    gateway: dict = {}
    if served:
        weights = {n: draw(st.sampled_from([1.0, 3.0])) for n in names}
        gateway["models"] = {SERVED: {"pools": weights}}
    if draw(st.booleans()):
        gateway["teams"] = draw(teams())
    n_streams = draw(st.integers(1, 3))
    data = {
        "name": "prop", "seed": draw(st.integers(0, 2**16)),
        "duration": draw(st.sampled_from([5, 10, 20])),
        "sample_interval": draw(st.sampled_from([0.5, 1.0, 2.0])),
        "record_steps": True,
        "workload": {"streams": {f"s{i}": draw(streams(names, served))
                                 for i in range(n_streams)}},
        "gateway": gateway,
        "pools": pool_cfgs,
    }
    drain = draw(st.sampled_from([None, 0, 3, 60]))
    if drain is not None:
        data["drain"] = drain
    return data


# -- the checks ------------------------------------------------------------------------------

def _max(values: pd.Series) -> float:
    return float(values.max()) if len(values) else 0.0


def _defined(a: pd.Series, b: pd.Series) -> pd.Series:
    return a.notna() & b.notna()


def run_counting_arrivals(scenario: Scenario) -> tuple[sim.Results, int]:
    """What ``sim.run`` does, keeping the number of arrivals the workload generated."""
    resolved, problems = resolve(scenario)
    assert resolved is not None, problems
    simulation = run_resolved(resolved, Path.cwd())
    return collect(simulation.account()), len(simulation.arrivals)


def retry_may_be_pending_at_cut_off(data: dict) -> bool:
    """A client retry can still be waiting when the run is cut off (short drain)."""
    retrying = any((s.get("retry") or {}).get("max_attempts", 3) > 1
                   for s in data["workload"]["streams"].values())
    return retrying and data.get("drain", 3600) < 10


def check_invariants(data: dict, *, every_arrival_recorded: bool = True) -> sim.Results:
    scenario = Scenario.model_validate(data)
    results, arrivals = run_counting_arrivals(scenario)
    req, ts, steps, summary = results.requests, results.timeseries, results.steps, \
        results.summary

    # One row per request, each with exactly one terminal status.
    assert len(req) == summary["requests"]["arrived"]
    assert req["request_id"].is_unique
    if every_arrival_recorded:
        assert len(req) == arrivals, (len(req), arrivals)
        assert (req["request_id"].to_numpy() == np.arange(arrivals)).all()
    status = req["status"].astype(str)
    assert set(status.unique()) <= STATUSES, status.unique()
    assert req["status"].notna().all()
    counts = status.value_counts()
    assert counts.get("completed", 0) == summary["requests"]["completed"]
    assert counts.get("rejected", 0) == summary["requests"]["rejected_total"]
    assert counts.get("unfinished", 0) == summary["requests"]["in_flight_at_end"]
    assert sum(summary["requests"]["rejected"].values()) == summary["requests"]["rejected_total"]
    rejected = req[status == "rejected"]
    assert (rejected["reject_reason"].astype(str) != "").all()
    assert (req.loc[status != "rejected", "reject_reason"].astype(str) == "").all()

    # Times are ordered where defined.
    for a, b in (("arrival_s", "admitted_s"), ("admitted_s", "first_token_s"),
                 ("first_token_s", "finish_s"), ("arrival_s", "finish_s")):
        both = _defined(req[a], req[b])
        bad = req[both & (req[a] > req[b] + 1e-9)]
        assert bad.empty, (a, b, bad[["request_id", a, b, "status"]].head())
    done = req[status == "completed"]
    assert done[["arrival_s", "admitted_s", "first_token_s", "finish_s"]].notna().all().all()
    assert (req["arrival_s"] >= 0).all()
    assert (req["arrival_s"] < scenario.duration).all()

    # Tokens.
    assert (req["output_tokens"] >= 0).all()
    assert (req["output_tokens"] <= req["max_output_tokens"]).all()
    assert (done["output_tokens"] == done["max_output_tokens"]).all()
    assert (req["cached_prompt_tokens"] >= 0).all()
    assert (req["prompt_tokens"] >= req["cached_prompt_tokens"]).all()
    assert (req["attempts"] >= 1).all() and (req["preemptions"] >= 0).all()

    # Engine steps stay inside the KV cache and the scheduler's limits.
    assert steps is not None
    assert (steps["kv_used_blocks"] >= 0).all()
    bad = steps[steps["kv_used_blocks"] > steps["kv_total_blocks"]]
    assert bad.empty, bad.head()
    assert (steps["end_s"] >= steps["start_s"]).all()
    for pool_name, cfg in scenario.pools.items():
        ps = steps[steps["pool"].astype(str) == pool_name]
        sched = cfg.scheduler
        if sched.type == "continuous":
            assert _max(ps["num_seqs"]) <= sched.max_num_seqs
            assert _max(ps["num_tokens"]) <= sched.max_num_batched_tokens + 1e-9
        elif sched.type == "static":
            assert _max(ps["num_seqs"]) <= sched.batch_size
        elif sched.type == "single":
            assert _max(ps["num_seqs"]) <= 1
        # One replica runs one step at a time.
        for _, rs in ps.groupby("replica"):
            rs = rs.sort_values("start_s", kind="stable")
            overlap = rs["start_s"].to_numpy()[1:] < rs["end_s"].to_numpy()[:-1] - 1e-9
            assert not overlap.any(), (pool_name, rs[np.r_[False, overlap]].head())

    # Billed GPU time covers busy GPU time.
    for pool_name, p in summary["pools"].items():
        assert 0.0 <= p["busy_frac"] <= 1.0 + REL, (pool_name, p["busy_frac"])
        assert p["gpu_hours"] >= 0 and p["cost_usd"] >= 0
        sched = scenario.pools[pool_name].scheduler
        limit = {"continuous": getattr(sched, "max_num_seqs", None),
                 "static": getattr(sched, "batch_size", None), "single": 1}[sched.type]
        assert p["max_running_seqs"] <= limit, (pool_name, p["max_running_seqs"], limit)

    # Time series: billed replicas include the ready ones.
    assert (ts["replicas"] >= ts["ready"]).all()
    assert (ts["replicas"] >= 0).all() and (ts["ready"] >= 0).all()
    assert (ts["in_system"] == ts["queued"] + ts["running"]).all()
    assert ((ts["kv_util"] >= 0) & (ts["kv_util"] <= 1 + REL)).all()
    # Busy time in an interval fits in the replicas billed then. (busy_frac itself
    # can exceed 1 while replicas drain: test_timeseries_busy_frac_while_draining.)
    for pool_name, pts in ts.groupby("pool", observed=True):
        busy_replicas = pts["busy_frac"].to_numpy() * pts["ready"].to_numpy()
        most = summary["pools"][pool_name]["replicas_max"]
        assert (busy_replicas <= most * (1 + REL) + REL).all(), (pool_name, pts.head())
        if "autoscaler" not in data["pools"][pool_name]:
            assert (pts["busy_frac"] <= 1 + REL).all(), (pool_name, pts.head())

    # Per-team usage adds up to the totals.
    team_rows = summary["teams"]
    assert sum(t["requests"] for t in team_rows.values()) == summary["requests"]["arrived"]
    assert sum(t["completed"] for t in team_rows.values()) == summary["requests"]["completed"]
    assert sum(t["rejected"] for t in team_rows.values()) == summary["requests"]["rejected_total"]
    for team, t in team_rows.items():
        assert sum(t["rejected_by_reason"].values()) == t["rejected"]
        rows = req[req["team"].astype(str) == team]
        assert t["requests"] == len(rows)
    team_cost = sum(t["cost_usd"] for t in team_rows.values())
    assert math.isclose(req["cost_usd"].sum(), team_cost, rel_tol=REL, abs_tol=1e-15)
    # A pool's cost is shared among the requests that did work there; a pool
    # without any such work keeps its cost unattributed.
    work = (req["prompt_tokens"] - req["cached_prompt_tokens"] + req["output_tokens"]) \
        .where(status != "rejected", 0)
    worked = {str(p) for p in req.loc[work > 0, "pool"].astype(str).unique()}
    attributable = sum(p["cost_usd"] for name, p in summary["pools"].items() if name in worked)
    assert math.isclose(team_cost, attributable, rel_tol=REL, abs_tol=1e-15), \
        (team_cost, attributable)
    if worked == set(summary["pools"]):
        assert math.isclose(team_cost, summary["cost"]["total_usd"], rel_tol=REL, abs_tol=1e-15)
    assert math.isclose(summary["cost"]["total_usd"],
                        sum(p["cost_usd"] for p in summary["pools"].values()), rel_tol=REL)
    return results


# -- the properties --------------------------------------------------------------------------

PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                             suppress_health_check=[HealthCheck.too_slow,
                                                    HealthCheck.data_too_large])


@pytest.mark.parametrize("kind", SCHEDULERS)
@PROPERTY_SETTINGS
@given(data=st.data())
def test_invariants_hold_for_random_small_scenarios(kind, data):
    scenario = data.draw(scenarios(kind), label="scenario")
    # Known bug (see test_requests_waiting_to_retry_at_the_cut_off_are_recorded): a
    # request waiting for a client retry when the run is cut off gets no row.
    try:
        check_invariants(scenario,
                         every_arrival_recorded=not retry_may_be_pending_at_cut_off(scenario))
    except RunRefused as exc:
        # refused before it runs: a stream whose every request is too long for its pools,
        # or a run whose streams draw no request at all (a bursty gamma stream over a few
        # seconds may draw none)
        assert ("longer than its pool serves" in exc.message
                or "no stream draws a request" in exc.message), exc.message
        assume(False)


def test_router_types_are_all_generated():
    """The strategies cover every router the simulator has."""
    from typing import get_args
    from sim.routers import ROUTERS as IMPLEMENTED
    assert {cfg.model_fields["type"].default for cfg in IMPLEMENTED} == set(ROUTERS)
    assert len(get_args(get_args(sim.routers.RouterConfig)[0])) == len(ROUTERS)


# -- fixed examples: every feature at once, and the corners ----------------------------------

def _base(**pool_overrides) -> dict:
    pool = {"model": MODEL, "hardware": "H100-SXM", "replicas": 2,
            "scheduler": {"type": "continuous", "max_num_batched_tokens": 256,
                          "max_num_seqs": 8},
            "router": {"type": "prefix_affinity"}, "kv_cache_bytes": "128MB"}
    pool.update(pool_overrides)
    return {
        "name": "fixed", "seed": 7, "duration": 10, "record_steps": True,
        "workload": {"streams": {
            "a": {"team": "alpha", "model": MODEL, "arrival": {"type": "poisson", "rate": 25},
                  "prompt_tokens": {"type": "uniform", "low": 1, "high": 700},
                  "output_tokens": {"type": "uniform", "low": 1, "high": 200},
                  "prefix": {"tokens": 100, "groups": 2},
                  "retry": {"max_attempts": 3, "base": 0.2, "max_delay": 2}},
            "b": {"team": "beta", "model": MODEL, "arrival": {"type": "gamma", "rate": 8, "cv": 3},
                  "prompt_tokens": 400, "output_tokens": 100, "priority": 2}}},
        "gateway": {"teams": {"alpha": {"requests_per_min": 600, "max_concurrency": 16},
                              "beta": {"tokens_per_min": 30_000}}},
        "pools": {"p0": pool},
    }


def _without_retries(data: dict) -> dict:
    for stream in data["workload"]["streams"].values():
        stream.pop("retry", None)
    return data


FIXED = {
    "preemption-heavy": _base(),
    "no-chunked-prefill": _base(scheduler={"type": "continuous", "max_num_batched_tokens": 512,
                                           "max_num_seqs": 4, "chunked_prefill": False}),
    "priority-with-aging": _base(scheduler={"type": "continuous", "policy": "priority",
                                            "priority_aging": 0.5, "max_num_seqs": 4,
                                            "exact_steps": True}),
    "static-batches": _base(scheduler={"type": "static", "batch_size": 4, "batch_timeout": 0.05},
                            router={"type": "power_of_two"}),
    "single": _base(scheduler={"type": "single"}, router={"type": "least_kv"},
                    kv_cache_bytes="512MB"),
    "autoscaled-from-zero": _base(replicas=1,
                                  autoscaler={"type": "target", "metric": "queue_per_replica",
                                              "target": 1, "min_replicas": 0, "max_replicas": 3,
                                              "stable_window": 4, "panic_window": 1,
                                              "tick": 0.5, "scale_down_cooldown": 2,
                                              "scale_to_zero_grace": 1},
                                  cold_start={"provisioning": 0.5, "load_bandwidth": "100GB/s"},
                                  queue={"capacity": 10, "fair": True,
                                         "max_outstanding_per_replica": 2}),
    "cut-off-without-drain": {**_without_retries(_base()), "drain": 0},
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_invariants_hold_for_fixed_scenarios(name):
    results = check_invariants(FIXED[name])
    assert len(results.requests) > 0


def test_fixed_scenarios_reach_the_corners_they_are_meant_for():
    """The fixed examples really exercise preemption, prefix hits, rejection, cut-off."""
    heavy = sim.run(Scenario.model_validate(FIXED["preemption-heavy"])).requests
    assert heavy["preemptions"].sum() > 0
    assert (heavy["cached_prompt_tokens"] > 0).any()
    assert (heavy["attempts"] > 1).any()
    assert (heavy["status"].astype(str) == "rejected").any()
    assert (heavy["status"].astype(str) == "completed").any()
    cut = sim.run(Scenario.model_validate(FIXED["cut-off-without-drain"])).requests
    assert (cut["status"].astype(str) == "unfinished").any()
    scaled = sim.run(Scenario.model_validate(FIXED["autoscaled-from-zero"])).timeseries
    assert scaled["replicas"].max() > 1 and (scaled["ready"] < scaled["replicas"]).any()


# -- regressions found by the properties -----------------------------------------------------

def _retry_cut_off(drain: float) -> dict:
    """60 requests/min burst 6 against ~5 requests/s, clients retrying after 1-4 s."""
    return {
        "name": "cutoff", "seed": 1, "duration": 10, "drain": drain,
        "workload": {"streams": {"s": {
            "team": "t", "model": MODEL, "arrival": {"type": "poisson", "rate": 5},
            "prompt_tokens": 100, "output_tokens": 20,
            "retry": {"max_attempts": 3, "base": 1, "max_delay": 5, "jitter": "none"}}}},
        "gateway": {"teams": {"t": {"requests_per_min": 6}}},
        "pools": {"p": {"model": MODEL, "hardware": "H100-SXM"}},
    }


# Found by test_invariants_hold_for_random_small_scenarios[static].
FOUND_RETRY_CUT_OFF = {
    "name": "prop", "seed": 1, "duration": 10, "sample_interval": 1.0, "record_steps": True,
    "drain": 0,
    "workload": {"streams": {"s0": {
        "team": "beta", "priority": 1, "model": SERVED,
        "arrival": {"type": "poisson",
                    "rate": {"type": "piecewise", "points": [[0, 8], [3, 0], [6, 8]]}},
        "prompt_tokens": {"type": "exponential", "mean": 207, "max": 400},
        "output_tokens": {"type": "fixed", "value": 25},
        "retry": {"max_attempts": 2, "base": 0.2, "max_delay": 2}}}},
    "gateway": {"models": {SERVED: {"pools": {"p0": 1.0}}},
                "teams": {"beta": {"requests_per_min": 30, "tokens_per_min": 20000,
                                   "max_priority": 1},
                          "gamma": {"weight": 0.5}, "alpha": {"requests_per_min": 300}}},
    "pools": {"p0": {
        "model": MODEL, "hardware": "H100-SXM", "replicas": 2,
        "scheduler": {"type": "static", "batch_size": 1, "batch_timeout": 0},
        "router": {"type": "power_of_two"}, "prefix_caching": True,
        "autoscaler": {"type": "target", "metric": "queue_per_replica", "target": 4,
                       "min_replicas": 1, "max_replicas": 3, "stable_window": 4,
                       "panic_window": 1, "tick": 0.5, "scale_down_cooldown": 2},
        "cold_start": {"provisioning": 2, "load_bandwidth": "100GB/s"},
        "queue": {"capacity": 20, "fair": True, "max_outstanding_per_replica": 5}}},
}

RETRY_CUT_OFF_BUG = (
    "a request that the gateway refused (429) and whose client retry is still pending when "
    "the run is cut off at duration + drain gets no row at all: Simulation.run marks only "
    "pool.open_requests() unfinished, so requests waiting in the gateway's retry backoff "
    "vanish from requests.parquet and summary.json's `arrived` (with drain 0, "
    "_retry_cut_off(0) records 6 of the 34 arrivals; with the default drain all 34)")


def test_requests_waiting_to_retry_at_the_cut_off_are_recorded():
    full = sim.run(Scenario.model_validate(_retry_cut_off(3600)))
    assert (full.requests["status"].astype(str) == "rejected").any()
    cut = check_invariants({**_retry_cut_off(0), "record_steps": True})
    assert len(cut.requests) == len(full.requests)
    assert cut.summary["requests"]["arrived"] == full.summary["requests"]["arrived"]


def test_found_example_retry_pending_at_cut_off():
    check_invariants(FOUND_RETRY_CUT_OFF)


def test_found_example_passes_the_other_invariants():
    """Apart from the missing rows, the found example keeps every invariant."""
    check_invariants(FOUND_RETRY_CUT_OFF, every_arrival_recorded=False)


def _draining_pool() -> dict:
    """Two replicas under an autoscaler capped at one: one drains while busy."""
    return {
        "name": "busy", "seed": 0, "duration": 5, "sample_interval": 0.5, "record_steps": True,
        "workload": {"streams": {"s": {"model": MODEL, "arrival": {"type": "poisson", "rate": 25},
                                       "prompt_tokens": 200, "output_tokens": 100}}},
        "pools": {"p": {"model": MODEL, "hardware": "H100-SXM", "replicas": 2,
                        "scheduler": {"type": "static", "batch_size": 1, "batch_timeout": 0},
                        "autoscaler": {"type": "target", "metric": "queue_per_replica",
                                       "target": 1, "min_replicas": 1, "max_replicas": 1,
                                       "tick": 0.5, "stable_window": 4, "panic_window": 1}}},
    }


def test_draining_pool_keeps_the_other_invariants():
    results = check_invariants(_draining_pool())
    assert (results.timeseries["draining"] > 0).any()


def test_timeseries_busy_frac_while_draining():
    ts = sim.run(Scenario.model_validate(_draining_pool())).timeseries
    assert (ts["draining"] > 0).any()
    assert (ts["busy_frac"] <= 1 + REL).all(), ts[["time_s", "ready", "draining", "busy_frac"]]


def _early_end() -> dict:
    """A 20 s run whose only stream stops sending at 2 s."""
    return {
        "name": "early", "seed": 1, "duration": 20,
        "workload": {"streams": {"s": {"model": MODEL, "arrival": {"type": "poisson", "rate": 5},
                                       "prompt_tokens": 100, "output_tokens": 20, "end": 2}}},
        "pools": {"p": {"model": MODEL, "hardware": "H100-SXM"}},
    }


def test_early_end_keeps_the_other_invariants():
    results = sim.run(Scenario.model_validate(_early_end()))
    assert results.summary["end_s"] == 20.0
    assert results.summary["pools"]["p"]["gpu_hours"] * 3600 == pytest.approx(20.0)


def test_timeseries_covers_the_billed_run():
    results = sim.run(Scenario.model_validate(_early_end()))
    ts = results.timeseries
    interval = 1.0
    assert ts["time_s"].max() >= results.summary["end_s"] - interval - 1e-9
    billed_usd = (ts["cost_usd_per_h"] * interval / 3600).sum()
    assert billed_usd == pytest.approx(results.summary["cost"]["total_usd"], rel=0.1)
