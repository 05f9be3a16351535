"""Validation of the workload config: mistakes must fail loudly with a useful message."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from sim.config.lengths import FixedLengthConfig
from sim.config.workload import (
    ConstantRateConfig,
    PiecewiseRateConfig,
    StreamConfig,
    WorkloadConfig,
)


def stream(**overrides):
    base = {"arrival": {"type": "poisson", "rate": "5/s"},
            "prompt_tokens": 100, "output_tokens": 50}
    base.update(overrides)
    return base


def test_shorthands_and_units_parse():
    s = StreamConfig(**stream(arrival={"type": "poisson", "rate": "300/min"},
                              start="1min", end="2h"))
    assert s.arrival.rate == ConstantRateConfig(type="constant", value=5.0)
    assert s.prompt_tokens == FixedLengthConfig(type="fixed", value=100)
    assert (s.start, s.end) == (60.0, 7200.0)
    pw = StreamConfig(**stream(arrival={"type": "gamma", "cv": 2, "rate": {
        "type": "piecewise", "points": [[0, "60/min"], ["1min", 0], ["2min", "2/s"]]}}))
    assert pw.arrival.rate.points == [(0.0, 1.0), (60.0, 0.0), (120.0, 2.0)]
    assert pw.team == "default" and pw.priority == 0 and pw.model is None


def test_unknown_key_in_stream_is_rejected():
    with pytest.raises(ValidationError, match="rat_scale|extra"):
        StreamConfig(**stream(rat_scale=2))


def test_type_typo_lists_valid_choices():
    with pytest.raises(ValidationError) as info:
        StreamConfig(**stream(arrival={"type": "poison", "rate": 5}))
    text = str(info.value)
    assert "'poison'" in text
    for tag in ("'poisson'", "'gamma'", "'trace'"):
        assert tag in text


def test_length_type_typo_lists_valid_choices():
    with pytest.raises(ValidationError) as info:
        StreamConfig(**stream(output_tokens={"type": "lognorm", "mean": 5, "cv": 1}))
    assert "'lognormal'" in str(info.value) and "'mixture'" in str(info.value)


@pytest.mark.parametrize("rate", [-5, "-5/s", 0,
                                  {"type": "piecewise", "points": [[0, -1]]},
                                  {"type": "sinusoidal", "mean": -1, "amplitude": 0,
                                   "period": 10}])
def test_negative_or_zero_rate_is_rejected(rate):
    with pytest.raises(ValidationError):
        StreamConfig(**stream(arrival={"type": "poisson", "rate": rate}))


def test_amplitude_above_mean_is_rejected():
    with pytest.raises(ValidationError, match="amplitude"):
        StreamConfig(**stream(arrival={"type": "poisson", "rate": {
            "type": "sinusoidal", "mean": 5, "amplitude": 6, "period": "1h"}}))


@pytest.mark.parametrize("points, message", [
    ([[1, 5]], "time 0"),
    ([[0, 5], [10, 1], [10, 2]], "strictly increase"),
    ([[0, 0], [10, 0]], "greater than 0"),
])
def test_bad_piecewise_points(points, message):
    with pytest.raises(ValidationError, match=message):
        PiecewiseRateConfig(type="piecewise", points=points)


def test_trace_stream_must_not_give_lengths():
    with pytest.raises(ValidationError, match="trace"):
        StreamConfig(arrival={"type": "trace", "path": "t.csv"}, prompt_tokens=100)
    ok = StreamConfig(arrival={"type": "trace", "path": "t.csv"})
    assert ok.prompt_tokens is None and ok.arrival.time_scale == 1.0


def test_non_trace_stream_needs_both_lengths():
    with pytest.raises(ValidationError, match="output_tokens"):
        StreamConfig(arrival={"type": "poisson", "rate": 1}, prompt_tokens=100)


def test_window_must_be_non_empty():
    with pytest.raises(ValidationError, match="end"):
        StreamConfig(**stream(start=10, end=10))


@pytest.mark.parametrize("dist", [
    {"type": "uniform", "low": 10, "high": 5},
    {"type": "lognormal", "mean": 100, "cv": 1, "min": 50, "max": 10},
    {"type": "lognormal", "mean": 100, "cv": 0},
    {"type": "exponential", "mean": -3},
    {"type": "fixed", "value": 0},
    {"type": "empirical", "values": [1, 2], "path": "x.csv", "column": "a"},
    {"type": "empirical", "values": [1, 2], "weights": [1]},
    {"type": "empirical", "path": "x.csv"},
    {"type": "mixture", "components": []},
    {"type": "mixture", "components": [{"weight": 1, "dist": {"type": "fixed", "value": 0}}]},
])
def test_bad_length_distributions(dist):
    with pytest.raises(ValidationError):
        StreamConfig(**stream(prompt_tokens=dist))


def test_workload_needs_streams_and_positive_scale():
    with pytest.raises(ValidationError, match="workload has no streams"):
        WorkloadConfig(streams={})
    with pytest.raises(ValidationError):
        WorkloadConfig(streams={"a": stream()}, rate_scale=0)
    w = WorkloadConfig(streams={"b": stream(), "a": stream()})
    assert list(w.streams) == ["b", "a"] and w.rate_scale == 1.0


def test_every_field_has_a_description():
    import sim.config.lengths
    import sim.config.workload
    from pydantic import BaseModel
    models = [v for mod in (sim.config.workload, sim.config.lengths) for v in vars(mod).values()
              if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == mod.__name__]
    assert len(models) > 15
    for model in models:
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
