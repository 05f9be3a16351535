"""generate_arrivals: merging, windows, and reproducibility from the seed."""
from __future__ import annotations

import math
import pathlib

import numpy as np
import pytest

from sim.config.workload import WorkloadConfig
from sim.workload import RequestArrivals, generate_arrivals

BASE = pathlib.Path(".")


def poisson_stream(rate, prompt, **extra):
    return {"arrival": {"type": "poisson", "rate": rate}, "prompt_tokens": prompt,
            "output_tokens": {"type": "lognormal", "mean": 200, "cv": 1.0}, **extra}


def workload(**streams):
    return WorkloadConfig(streams=streams)


MIXED = workload(
    chat=poisson_stream(20, 111),
    batch={"arrival": {"type": "gamma", "cv": 2.0, "rate": {
        "type": "sinusoidal", "mean": 5, "amplitude": 4, "period": 60}},
        "prompt_tokens": 222, "output_tokens": {"type": "uniform", "low": 1, "high": 50}},
    late=poisson_stream(10, 333, start=100, end=150),
)


def gen(w, seed=42, duration_s=300.0):
    return generate_arrivals(w, duration_s, np.random.SeedSequence(seed), BASE)


def assert_same(a: RequestArrivals, b: RequestArrivals):
    for name in ("arrival_s", "prompt_tokens", "output_tokens", "stream_index"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), name
    assert a.stream_names == b.stream_names


def test_merge_is_sorted_and_labelled():
    out = gen(MIXED)
    assert out.stream_names == ("chat", "batch", "late")
    assert out.arrival_s.dtype == np.float64 and out.stream_index.dtype == np.int32
    assert out.prompt_tokens.dtype == np.int64 and out.output_tokens.dtype == np.int64
    assert len(out) == len(out.arrival_s) == len(out.stream_index)
    assert np.all(np.diff(out.arrival_s) >= 0)
    # Each stream's fixed prompt length identifies it.
    np.testing.assert_array_equal(out.prompt_tokens, np.array([111, 222, 333])[out.stream_index])
    late = out.arrival_s[out.stream_index == 2]
    assert late.min() >= 100 and late.max() < 150
    assert abs(len(late) - 500) < 4 * math.sqrt(500)
    assert out.arrival_s.max() < 300.0
    assert out.output_tokens[out.stream_index == 1].max() <= 50


def test_ties_keep_stream_order(tmp_path):
    (tmp_path / "t.csv").write_text("timestamp,prompt_tokens,output_tokens\n0,1,1\n1,2,2\n")
    w = WorkloadConfig(streams={
        "b": {"arrival": {"type": "trace", "path": "t.csv"}},
        "a": {"arrival": {"type": "trace", "path": "t.csv", "time_scale": 2}}})
    out = generate_arrivals(w, 10.0, np.random.SeedSequence(0), tmp_path)
    np.testing.assert_array_equal(out.arrival_s, [0.0, 0.0, 1.0, 2.0])
    np.testing.assert_array_equal(out.stream_index, [0, 1, 0, 1])


def test_same_seed_is_bit_identical():
    assert_same(gen(MIXED), gen(MIXED))
    seq = np.random.SeedSequence(7)
    first = generate_arrivals(MIXED, 300.0, seq, BASE)
    assert_same(first, generate_arrivals(MIXED, 300.0, seq, BASE))  # seq is not consumed


def test_different_seed_differs():
    a, b = gen(MIXED, seed=1), gen(MIXED, seed=2)
    assert len(a) != len(b) or not np.array_equal(a.arrival_s, b.arrival_s)
    n = min(len(a), len(b))
    assert not np.array_equal(a.output_tokens[:n], b.output_tokens[:n])


def test_adding_a_stream_keeps_earlier_streams():
    one = gen(workload(chat=poisson_stream(20, 111)))
    two = gen(workload(chat=poisson_stream(20, 111), extra=poisson_stream(50, 5)))
    chat = two.stream_index == 0
    np.testing.assert_array_equal(one.arrival_s, two.arrival_s[chat])
    np.testing.assert_array_equal(one.output_tokens, two.output_tokens[chat])


def test_rate_scale_multiplies_rates_and_keeps_length_draws():
    w = workload(chat=poisson_stream(20, 111))
    base = gen(w, duration_s=1000.0)
    scaled = gen(w.model_copy(update={"rate_scale": 2.5}), duration_s=1000.0)
    assert abs(len(scaled) - 50_000) < 4 * math.sqrt(50_000)
    n = len(base)
    # Lengths come from their own generator: the first n draws are shared.
    np.testing.assert_array_equal(base.output_tokens, scaled.output_tokens[:n])


def test_streams_outside_the_run_are_empty():
    out = gen(workload(a=poisson_stream(5, 1, start=400)), duration_s=300.0)
    assert len(out) == 0 and out.stream_names == ("a",)
    assert out.arrival_s.dtype == np.float64 and out.stream_index.dtype == np.int32


def test_arrays_are_frozen_dataclass():
    out = gen(workload(a=poisson_stream(5, 1)))
    with pytest.raises(AttributeError):
        out.arrival_s = None
