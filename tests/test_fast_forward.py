"""Fast-forward gives the same per-request results as stepping, on every
shipped scenario (shortened to keep the suite quick)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import sim
from sim.config.scenario import Scenario

SCENARIOS = sorted((Path(__file__).resolve().parent.parent / "scenarios").glob("*.yaml"))


def with_exact_steps(scenario: Scenario, exact: bool, duration_s: float) -> Scenario:
    data = scenario.model_dump()
    data["duration"] = min(data["duration"], duration_s)
    for pool in data["pools"].values():
        if pool["scheduler"]["type"] == "continuous":
            pool["scheduler"]["exact_steps"] = exact
    out = Scenario.model_validate(data)
    out._source = scenario._source
    return out


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_fast_forward_equals_exact_steps(path):
    """first_token_s and finish_s agree to 1e-9 relative; statuses, output
    tokens and preemptions are identical."""
    base = sim.load_scenario(path)
    duration = 20.0 if "bench" not in path.stem else 2.0
    ff = sim.run(with_exact_steps(base, False, duration))
    exact = sim.run(with_exact_steps(base, True, duration))
    a, b = ff.requests, exact.requests
    assert len(a) == len(b) > 0
    for col in ("status", "output_tokens", "preemptions", "replica"):
        pd.testing.assert_series_equal(a[col], b[col])
    for col in ("admitted_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(a[col], b[col], rtol=1e-9, atol=0, err_msg=col)
    assert ff.extra["steps"] == exact.extra["steps"]
