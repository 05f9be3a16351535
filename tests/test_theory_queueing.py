"""Queueing theory checks: the ``single`` scheduler is an M/G/1 FCFS queue
(Poisson arrivals, service time set by each request's length), so its mean
wait must follow Pollaczek–Khinchine, its busy fraction the offered load, and
any stable run Little's law.

Service times are short (prompt 128, output uniform 20..200 on a small model),
so many requests are cheap; several seeds are pooled and a warm-up share of
arrivals is dropped. Every expectation is computed from quantities measured in
the run (arrival rate, service-time moments) or from the cost model.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd
import pytest

import sim
from simfactories import (continuous, lognormal, make_cost_model, make_pool,
                          poisson_stream, run_scenario, single, single_service_time_s,
                          uniform)

MODEL, HARDWARE = "tiny-llama", "H100-SXM"
PROMPT_TOKENS = 128
OUTPUT_LOW, OUTPUT_HIGH = 20, 200
SEEDS = (101, 102, 103, 104)
WARMUP_SHARE = 0.05
REQUESTS_PER_SEED = {0.5: 15_000, 0.8: 25_000}


@lru_cache(maxsize=None)
def service_time_by_output() -> dict[int, float]:
    """Cost-model service time of a lone request for each possible output length."""
    cost = make_cost_model(model=MODEL, hardware=HARDWARE)
    return {o: single_service_time_s(cost, PROMPT_TOKENS, o)
            for o in range(OUTPUT_LOW, OUTPUT_HIGH + 1)}


def mean_service_s() -> float:
    """E[S] for uniformly distributed output lengths, from the cost model."""
    return float(np.mean(list(service_time_by_output().values())))


@lru_cache(maxsize=None)
def mg1_run(rho: float, seed: int) -> sim.Results:
    """One replica, ``single`` scheduler, Poisson arrivals at rate rho / E[S]."""
    rate = rho / mean_service_s()
    duration = REQUESTS_PER_SEED[rho] / rate
    return run_scenario(
        stream=poisson_stream(rate=rate, prompt_tokens=PROMPT_TOKENS,
                              output_tokens=uniform(OUTPUT_LOW, OUTPUT_HIGH)),
        pool=make_pool(model=MODEL, hardware=HARDWARE, scheduler=single()),
        duration=duration, seed=seed, sample_interval=duration / 2000)


def steady_part(results: sim.Results) -> tuple[pd.DataFrame, float]:
    """Requests that arrived after the warm-up, and the length of that window."""
    duration = results.scenario.duration
    start = WARMUP_SHARE * duration
    d = results.requests
    return d[d["arrival_s"] >= start], duration - start


def test_theory_single_service_time_matches_cost_model():
    """Under ``single`` each request's service time (e2e − queue) is its
    prefill step plus one decode step per further token, as priced by the cost
    model, whatever the load."""
    d = mg1_run(0.8, SEEDS[0]).requests
    assert (d["status"] == "completed").all()
    table = service_time_by_output()
    expected = d["output_tokens"].map(table).to_numpy()
    np.testing.assert_allclose((d["e2e_s"] - d["queue_s"]).to_numpy(), expected, rtol=1e-9)


def test_theory_single_server_follows_lindley_recursion():
    """One FCFS server: each request starts when it arrives or when the previous
    one finishes, whichever is later (W_k = max(0, finish_{k−1} − arrival_k))."""
    d = mg1_run(0.8, SEEDS[0]).requests.sort_values("arrival_s")
    arrival = d["arrival_s"].to_numpy()
    finish = d["finish_s"].to_numpy()
    expected = np.maximum(0.0, finish[:-1] - arrival[1:])
    np.testing.assert_allclose(d["queue_s"].to_numpy()[1:], expected, rtol=1e-9, atol=1e-9)
    assert d["queue_s"].iloc[0] == 0.0
    assert (d["queue_s"] >= 0).all()
    assert (d["queue_s"] > 0).mean() > 0.5   # the queue is really exercised


@pytest.mark.slow
@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_theory_mean_wait_matches_pollaczek_khinchine(rho):
    """Mean queueing delay over several seeds (warm-up dropped) is within 5% of
    W = λ·E[S²] / (2·(1 − ρ)), with λ, E[S], E[S²] measured in the runs."""
    waits, services, arrivals, window_s = [], [], 0, 0.0
    for seed in SEEDS:
        d, window = steady_part(mg1_run(rho, seed))
        assert (d["status"] == "completed").all()
        waits.append(d["queue_s"].to_numpy())
        services.append((d["e2e_s"] - d["queue_s"]).to_numpy())
        arrivals += len(d)
        window_s += window
    wait = np.concatenate(waits)
    service = np.concatenate(services)
    lam = arrivals / window_s
    rho_measured = lam * service.mean()
    assert rho_measured == pytest.approx(rho, rel=0.03)
    pk = lam * np.mean(service ** 2) / (2.0 * (1.0 - rho_measured))
    assert wait.mean() == pytest.approx(pk, rel=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_theory_busy_fraction_equals_offered_load(rho):
    """The server is busy a share λ·E[S] = ρ of the time, and the sampled
    busy fraction stays within [0, 1] (up to round-off)."""
    for seed in SEEDS[:2]:
        results = mg1_run(rho, seed)
        busy = results.summary["pools"]["p"]["busy_frac"]
        assert busy == pytest.approx(rho, rel=0.04)
        assert results.timeseries["busy_frac"].between(0.0, 1.0 + 1e-6).all()


def littles_law_check(results: sim.Results, tolerance: float = 0.05) -> None:
    """Time-average number in system (mean of the sampled in_system) equals
    throughput × mean time in system, and likewise for the waiting queue."""
    d = results.requests
    assert (d["status"] == "completed").all()
    ts = results.timeseries
    throughput = results.summary["throughput"]["requests_per_s"]
    assert ts["in_system"].mean() == pytest.approx(throughput * d["e2e_s"].mean(),
                                                  rel=tolerance)
    assert ts["queued"].mean() == pytest.approx(throughput * d["queue_s"].mean(),
                                               rel=2 * tolerance)


def test_theory_littles_law_single_server():
    """Little's law L = λW on the M/G/1 run at ρ = 0.8."""
    littles_law_check(mg1_run(0.8, SEEDS[1]))


def test_theory_littles_law_continuous_batching():
    """Little's law L = λW for continuous batching of Llama-3.1-8B on one H100
    at a steady load (no preemption, so a request waits only once)."""
    results = run_scenario(
        stream=poisson_stream(rate=12, prompt_tokens=lognormal(800, 1.0, max=6000),
                              output_tokens=lognormal(200, 1.0, max=1500)),
        pool=make_pool(scheduler=continuous()),
        duration=600.0, seed=7, sample_interval=0.25)
    assert results.requests["preemptions"].sum() == 0
    assert results.timeseries["in_system"].mean() > 5   # a real queue of work
    littles_law_check(results)
