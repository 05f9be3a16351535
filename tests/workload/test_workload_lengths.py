"""Length distributions: moments, bounds, proportions and file-backed sampling."""
from __future__ import annotations

import math
import pathlib
import re

import numpy as np
import pydantic
import pytest

from sim.config.workload import StreamConfig
from sim.workload import WorkloadDataError
from sim.workload.lengths import sample_lengths

N = 400_000


def dist(cfg):
    return StreamConfig(arrival={"type": "poisson", "rate": 1}, prompt_tokens=cfg,
                        output_tokens=1).prompt_tokens


def draw(cfg, n=N, seed=0, base_dir=pathlib.Path(".")):
    out = sample_lengths(dist(cfg), n, np.random.default_rng(seed), base_dir)
    assert out.dtype == np.int64 and out.shape == (n,) and out.min() >= 1
    return out


@pytest.mark.parametrize("mean, cv", [(500.0, 1.2), (2000.0, 0.5)])
def test_lognormal_mean_and_cv(mean, cv):
    x = draw({"type": "lognormal", "mean": mean, "cv": cv}).astype(float)
    assert x.mean() == pytest.approx(mean, rel=0.02)
    assert x.std() / x.mean() == pytest.approx(cv, rel=0.03)


def test_lognormal_clipping():
    x = draw({"type": "lognormal", "mean": 300, "cv": 2.0, "min": 100, "max": 1000})
    assert x.min() == 100 and x.max() == 1000


def test_exponential_mean_and_clip():
    x = draw({"type": "exponential", "mean": 300})
    assert x.mean() == pytest.approx(300, rel=0.02)
    clipped = draw({"type": "exponential", "mean": 300, "max": 400})
    assert clipped.max() == 400
    # P(X > 399.5) = exp(-399.5 / 300): that share of the draws sits on the bound
    assert (clipped == 400).mean() == pytest.approx(math.exp(-399.5 / 300), abs=0.02)


@pytest.mark.parametrize("cfg, bound", [
    ({"type": "exponential", "mean": 300, "max": 207}, "max (207) is below the median"),
    ({"type": "lognormal", "mean": 100, "cv": 1, "min": 72}, "min (72) is above the median"),
])
def test_more_than_half_of_the_draws_on_a_bound_is_refused(cfg, bound):
    """Median of exponential(300) = 207.9; of lognormal(mean 100, cv 1) = 70.7."""
    with pytest.raises(pydantic.ValidationError, match=re.escape(bound)):
        dist(cfg)
    edge = dict(cfg, **({"max": 208} if "max" in cfg else {"min": 71}))
    assert len(draw(edge, n=10)) == 10      # half a token inside: accepted


def test_fixed_and_uniform_inclusive():
    assert np.all(draw(7, n=100) == 7)
    x = draw({"type": "uniform", "low": 2, "high": 4}, n=30_000)
    assert set(np.unique(x)) == {2, 3, 4}
    assert np.bincount(x)[2:] == pytest.approx([10_000] * 3, abs=4 * math.sqrt(10_000))


def test_empirical_inline_values_and_weights():
    x = draw({"type": "empirical", "values": [3, 7, 11], "weights": [1, 0, 3]}, n=40_000)
    assert set(np.unique(x)) == {3, 11}
    p = np.mean(x == 11)
    assert abs(p - 0.75) < 4 * math.sqrt(0.75 * 0.25 / 40_000)


def test_empirical_from_file(tmp_path):
    (tmp_path / "lens").mkdir()
    (tmp_path / "lens" / "obs.csv").write_text("id,prompt_tokens\n1,5\n2,9\n3,9\n4,120\n")
    cfg = {"type": "empirical", "path": "lens/obs.csv", "column": "prompt_tokens"}
    x = draw(cfg, n=20_000, base_dir=tmp_path)
    assert set(np.unique(x)) == {5, 9, 120}
    assert np.mean(x == 9) == pytest.approx(0.5, abs=0.02)


def test_empirical_file_errors(tmp_path):
    (tmp_path / "obs.csv").write_text("id,prompt\n1,5\n2,0\n")
    with pytest.raises(WorkloadDataError, match="prompt_tokens.*it has 2 column"):
        draw({"type": "empirical", "path": "obs.csv", "column": "prompt_tokens"},
             base_dir=tmp_path)
    with pytest.raises(WorkloadDataError) as info:
        draw({"type": "empirical", "path": "obs.csv", "column": "prompt"}, base_dir=tmp_path)
    assert info.value.line == 3 and info.value.path == tmp_path / "obs.csv"
    with pytest.raises(WorkloadDataError, match="not found"):
        draw({"type": "empirical", "path": "nope.csv", "column": "x"}, base_dir=tmp_path)


def test_mixture_proportions():
    cfg = {"type": "mixture", "components": [
        {"weight": 0.7, "dist": 10},
        {"weight": 0.3, "dist": {"type": "uniform", "low": 1000, "high": 2000}}]}
    x = draw(cfg, n=50_000)
    p_short = np.mean(x == 10)
    assert abs(p_short - 0.7) < 4 * math.sqrt(0.21 / 50_000)
    long = x[x != 10]
    assert long.min() >= 1000 and long.max() <= 2000


def test_zero_draws():
    assert len(sample_lengths(dist({"type": "lognormal", "mean": 5, "cv": 1}), 0,
                              np.random.default_rng(0), pathlib.Path("."))) == 0


@pytest.mark.parametrize("preset, mean", [("azure-2023-conv-prompt", 1154.7),
                                          ("azure-2023-conv-output", 211.1),
                                          ("azure-2023-code-prompt", 2047.8),
                                          ("mooncake-conversation-output", 342.6)])
def test_a_preset_resamples_a_shipped_traces_lengths(preset, mean):
    """The mean of many draws is the trace's mean (as its README gives it)."""
    x = draw({"type": "empirical", "preset": preset}, n=200_000)
    assert x.mean() == pytest.approx(mean, rel=0.02)


def test_a_preset_takes_no_column_and_is_one_source():
    for bad in ({"type": "empirical", "preset": "azure-2023-conv-prompt", "column": "x"},
                {"type": "empirical", "preset": "azure-2023-conv-prompt", "values": [1]}):
        with pytest.raises(pydantic.ValidationError):
            dist(bad)
    with pytest.raises(pydantic.ValidationError, match="azure-2023-conv-prompt"):
        dist({"type": "empirical", "preset": "azure-2032-conv-prompt"})
