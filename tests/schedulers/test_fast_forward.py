"""Fast-forward gives the same per-request results as stepping, on every
shipped scenario (shortened to keep the suite quick)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import sim
from sim.config.scenario import Scenario

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml"))


def with_exact_steps(scenario: Scenario, exact: bool, duration_s: float) -> Scenario:
    data = scenario.model_dump()
    data["duration"] = min(data["duration"], duration_s)
    # a shortened run keeps its warm-up and samples inside it
    data["warmup"] = min(data["warmup"], data["duration"] / 2)
    data["sample_interval"] = min(data["sample_interval"], data["duration"])
    for pool in data["pools"].values():
        if pool["scheduler"]["type"] == "continuous":
            pool["scheduler"]["exact_steps"] = exact
    out = Scenario.model_validate(data)
    out._source = scenario._source
    return out


def assert_same_requests(a: pd.DataFrame, b: pd.DataFrame, rtol: float) -> None:
    """The same requests, statuses, tokens, preemptions and replicas; their times to
    ``rtol`` relative."""
    assert len(a) == len(b) > 0
    for col in ("status", "output_tokens", "preemptions", "replica"):
        pd.testing.assert_series_equal(a[col], b[col])
    for col in ("admitted_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(a[col], b[col], rtol=rtol, atol=0, err_msg=col)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_fast_forward_equals_exact_steps(path):
    """first_token_s and finish_s agree to 1e-9 relative; statuses, output
    tokens and preemptions are identical."""
    base = sim.load_scenario(path)
    duration = 20.0 if "bench" not in path.stem else 2.0
    ff = sim.run(with_exact_steps(base, False, duration))
    exact = sim.run(with_exact_steps(base, True, duration))
    assert_same_requests(ff.requests, exact.requests, rtol=1e-9)
    assert ff.extra["steps"] == exact.extra["steps"]
    # the run's pooled gaps between output tokens (summary.json's ITL percentiles)
    itl_ff, itl_exact = ff.summary["latency_s"]["itl"], exact.summary["latency_s"]["itl"]
    for key in ("p50", "p90", "p95", "p99", "p999"):
        assert itl_ff[key] == pytest.approx(itl_exact[key], rel=1e-9), key


def test_between_steps_the_cohort_holds_exactly_the_blocks_of_its_tokens(monkeypatch):
    """What the O(1) block count of the next decode step rests on: after every applied
    segment (admissions, fast-forwards, finishes, preemptions under a small KV cache,
    priority and FCFS) the decoders hold the blocks covering their tokens, no more."""
    from simfactories import (KV_HEAVY_NAME, continuous, lognormal, make_pool,
                              poisson_stream, run_scenario)

    from sim.schedulers.continuous import ContinuousScheduler
    checked = []
    original = ContinuousScheduler.finish_segment

    def checking(self, seg, num_steps, start_s, end_s):
        original(self, seg, num_steps, start_s, end_s)
        assert self.cohort.blocks_held == self.cohort.blocks_at(self.step)
        checked.append(num_steps)

    monkeypatch.setattr(ContinuousScheduler, "finish_segment", checking)
    for policy in ("fcfs", "priority"):
        results = run_scenario(
            stream=poisson_stream(rate=20.0, prompt_tokens=lognormal(300, max=1000),
                                  output_tokens=lognormal(120, max=400)),
            pool=make_pool(model=KV_HEAVY_NAME, kv_cache_bytes="1GiB",
                           scheduler=continuous(policy=policy)),
            duration=30.0)
        assert (results.requests["preemptions"] > 0).any()      # the cache was short
    assert len(checked) > 1000 and max(checked) > 1


def test_fast_forward_on_measured_kernels_sums_each_run_in_closed_form(monkeypatch):
    """bench-decode-heavy (4,000-token answers on the measured kernels of an 8B on H100,
    each decode run crossing pieces of the decode-attention table) fast-forwarded with
    the table never read over a run's steps (``sim/cost/table_steps.py`` sums them)
    gives exact_steps' per-request times to 1e-12 relative, the closed form's stated
    error, and the same steps, tokens and statuses."""
    from sim.cost.calibrated import CalibratedCostModel
    from sim.cost.tables import Table
    base = sim.load_scenario(SCENARIOS[0].parent / "bench-decode-heavy.yaml")
    exact = sim.run(with_exact_steps(base, True, 20.0))

    def no_arrays(self, *args):
        raise AssertionError("a fast-forward read the table once per step")
    monkeypatch.setattr(Table, "__call__", no_arrays)
    monkeypatch.setattr(CalibratedCostModel, "decode_run_s", no_arrays)
    ff = sim.run(with_exact_steps(base, False, 20.0))
    assert next(iter(ff.summary["pools"].values()))["cost_model"].startswith("calibrated")
    assert len(ff.requests) > 10
    assert_same_requests(ff.requests, exact.requests, rtol=1e-12)
    assert ff.extra["steps"] == exact.extra["steps"] > 10 * ff.extra["segments"]
    itl_ff, itl_exact = ff.summary["latency_s"]["itl"], exact.summary["latency_s"]["itl"]
    for key in ("p50", "p99", "max"):
        assert itl_ff[key] == pytest.approx(itl_exact[key], rel=1e-12), key
