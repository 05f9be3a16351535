"""A measured-kernel model sums a fast-forwarded decode run in closed form
(``sim/cost/table_steps.py``): its step ends equal the sum of its steps priced one by
one, as ``exact_steps`` prices them, to 1e-12 relative (the closed form's remainder is
bounded below 1e-16 of the sum; the rest is float rounding), wherever the run lies on
the decode-attention table, and it reads the table a bounded number of times whatever
the run's length."""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import profiles
from sim.config.paths import data_dir
from sim.cost.calibrated import CalibratedConfig, CalibratedCostModel
from sim.cost.profile_file import load_profile
from sim.cost.tables import Table
from sim.cost.table_steps import PowerPieces, power_series_sum

REL = 1e-12


def _profile(*parts: str, hardware: str | None = None) -> CalibratedCostModel:
    path = data_dir("profiles").joinpath("calibrated", *parts)
    data = load_profile(path)
    return CalibratedCostModel(profiles.find_model(data["model"]["name"]),
                               profiles.find_hardware(hardware or data["device_name"]),
                               data["tp"],
                               data["dtype"], data.get("kv_dtype") or data["dtype"],
                               CalibratedConfig(profile=str(path)))


def gpu_8b() -> CalibratedCostModel:
    """Llama-3.1-8B on H100 (AIConfigurator's kernels): its decode-attention table has
    points at 2, 4, ..., 524,288 keys."""
    return _profile("gpu", "h100-sxm", "vllm", "llama-3.1-8b-tp1-fp8.yaml")


def cpu_engine() -> CalibratedCostModel:
    """A CPU profile with an engine's cost per key read and flat table pieces."""
    return _profile("cpu", "intel-xeon", "validation", "profile",
                    "validate-single-engine.yaml", hardware="cpu")


def step_by_step(cost, num_seqs: int, kv_first: float, num_steps: int) -> np.ndarray:
    """Each step's seconds as ``exact_steps`` prices it (``step_scalar``)."""
    n = float(num_seqs)
    return np.array([cost.step_scalar(n, n, 0.0, kv_first + i * n)[0]
                     for i in range(num_steps)])


def assert_run_is_the_per_step_sum(cost, num_seqs: int, kv_first: float, num_steps: int):
    run = cost.decode_run(num_seqs, kv_first, num_steps)
    ends = run.step_end_s
    per_step = cost.decode_run_s(num_seqs, kv_first, num_steps)
    want = np.cumsum(per_step)
    got = np.array([ends[i] for i in range(num_steps)])
    np.testing.assert_allclose(got, want, rtol=REL, atol=0)
    assert len(ends) == num_steps
    assert run.duration_s == pytest.approx(want[-1], rel=REL)
    lengths = np.array([ends.step_s(i) for i in range(num_steps)])
    np.testing.assert_allclose(lengths, per_step, rtol=REL, atol=0)
    assert ends.max_step_s(num_steps) == pytest.approx(per_step.max(), rel=REL)
    return got


# (num_seqs, keys of the first step, steps): what each crosses on the 8B table
RUNS = [
    pytest.param(1, 1.0, 1, id="one-step-below-the-first-point"),
    pytest.param(1, 2.0, 1, id="one-step-on-the-first-point"),
    pytest.param(64, 64 * 900.0, 1, id="one-step"),
    pytest.param(1, 1.0, 5000, id="from-one-key-across-12-pieces"),
    pytest.param(7, 7.0, 3000, id="seven-sequences-across-pieces"),
    pytest.param(64, 8192.0, 129, id="starting-on-a-point-ending-on-the-next"),
    pytest.param(64, 8193.0, 128, id="starting-past-a-point-ending-before-the-next"),
    pytest.param(256, 256 * 3000.0, 2000, id="past-the-last-point"),
    pytest.param(200, 524288.0 - 200 * 30, 60, id="across-the-last-point"),
    pytest.param(3, 3 * 1e5, 100_000, id="many-steps"),
    pytest.param(5, 5.0, 200_000, id="many-steps-across-all-pieces"),
]


@pytest.mark.parametrize("num_seqs,kv_first,num_steps", RUNS)
def test_closed_form_ends_equal_the_per_step_sum(num_seqs, kv_first, num_steps):
    """Step ends, each step's length and the run's total equal the per-step sum of
    ``decode_run_s`` to 1e-12 relative."""
    assert_run_is_the_per_step_sum(gpu_8b(), num_seqs, kv_first, num_steps)


@pytest.mark.parametrize("num_seqs,kv_first,num_steps", [(1, 1.0, 40), (6, 6 * 250.0, 400),
                                                          (8, 8.0, 5000), (32, 32 * 1100.0, 90)])
def test_closed_form_equals_exact_steps_with_an_engines_cost_per_key(num_seqs, kv_first,
                                                                     num_steps):
    """A profile with an engine's cost per key read (linear in the keys) and flat pieces
    of the table (exponent 0): the ends are the sum of ``step_scalar``'s steps."""
    cost = cpu_engine()
    got = assert_run_is_the_per_step_sum(cost, num_seqs, kv_first, num_steps)
    np.testing.assert_allclose(got, np.cumsum(step_by_step(cost, num_seqs, kv_first,
                                                           num_steps)), rtol=REL, atol=0)


@pytest.mark.parametrize("host_s", [2e-3, 6.9e-3, 0.5])
def test_an_overlapped_host_time_floors_the_first_steps(host_s):
    """An engine whose host time overlaps the GPU step: a step lasts the longer of the
    two, so the run's first steps (shorter on the GPU) last the host time: below every
    step, crossing them, above all."""
    cost = gpu_8b().with_engine_host(host_s, 0.0, overlap=True)
    for num_seqs, kv_first, num_steps in [(64, 64 * 500.0, 3000), (1, 1.0, 2000)]:
        assert_run_is_the_per_step_sum(cost, num_seqs, kv_first, num_steps)


@pytest.mark.parametrize("num_seqs,kv_first,num_steps", [(1, 1.0, 1), (64, 8192.0, 129),
                                                          (3, 3e5, 100_000), (5, 5.0, 20_000)])
def test_closed_form_equals_exact_steps(num_seqs, kv_first, num_steps):
    """The reference itself: each step priced alone by ``step_scalar`` (what
    ``exact_steps: true`` runs), summed, to 1e-12 relative."""
    cost = gpu_8b()
    run = cost.decode_run(num_seqs, kv_first, num_steps)
    want = np.cumsum(step_by_step(cost, num_seqs, kv_first, num_steps))
    got = np.array([run.step_end_s[i] for i in range(num_steps)])
    np.testing.assert_allclose(got, want, rtol=REL, atol=0)


def test_a_run_reads_the_table_a_bounded_number_of_times_whatever_its_length(monkeypatch):
    """Building a run and reading its total costs O(table pieces it crosses), not
    O(steps): a million steps read the table no more often than a hundred, and never
    as an array over the steps."""
    cost = gpu_8b()
    reads = []
    scalar = Table.scalar
    monkeypatch.setattr(Table, "scalar", lambda self, x: reads.append(x) or scalar(self, x))

    def no_arrays(self, x):
        raise AssertionError("a decode run read the table once per step")
    monkeypatch.setattr(Table, "__call__", no_arrays)
    counts = []
    for num_steps in (100, 1_000_000):
        reads.clear()
        run = cost.decode_run(4, 4 * 600.0, num_steps)
        assert run.duration_s > 0
        counts.append(len(reads))
    assert counts[1] <= counts[0] + 8        # a few more table pieces crossed



def test_a_cut_runs_last_step_reads_the_table_once(monkeypatch):
    """A run cut after k steps asks for step k - 1's length twice (the longest of the
    segment's steps, then the gaps of its steps): the second answer is the first one,
    read from the table once, and is the step priced alone (to float rounding)."""
    cost = gpu_8b()
    reads = []
    scalar = Table.scalar
    monkeypatch.setattr(Table, "scalar", lambda self, x: reads.append(x) or scalar(self, x))
    ends = cost.decode_run(4, 4 * 600.0, 1_000).step_end_s
    reads.clear()
    longest = ends.max_step_s(37)
    assert ends.step_s(36) == longest
    assert len(reads) == 1
    alone = cost.step_scalar(4.0, 4.0, 0.0, 4 * 600.0 + 36 * 4)[0]
    assert longest == pytest.approx(alone, rel=REL)

@settings(max_examples=200, deadline=None)
@given(num_seqs=st.integers(1, 256), mean_context=st.floats(1.0, 5000.0),
       num_steps=st.integers(1, 3000), where=st.floats(-0.1, 1.2), at_an_end=st.booleans(),
       inclusive=st.booleans())
def test_count_before_equals_a_search_of_the_ends(num_seqs, mean_context, num_steps, where,
                                                  at_an_end, inclusive):
    """The count of ends before a time (what a cut and a held arrival read) equals
    bisecting the ends as ``[i]`` gives them, at and between ends."""
    cost = gpu_8b().with_engine_host(3e-3, 0.0, overlap=True)
    run = cost.decode_run(num_seqs, float(math.ceil(num_seqs * mean_context)), num_steps)
    ends = run.step_end_s
    listed = [ends[i] for i in range(num_steps)]
    assert all(b > a for a, b in zip(listed, listed[1:]))
    t = listed[min(int(where * num_steps), num_steps - 1) if where > 0 else 0] \
        if at_an_end else where * run.duration_s
    want = (bisect_right if inclusive else bisect_left)(listed, t)
    assert ends.count_before(t, inclusive) == want


@pytest.mark.parametrize("s", [0.0, 0.03, 0.5, 1.0, 1.7, 2.0, 3.0, 4.6, 8.5])
@pytest.mark.parametrize("m", [1, 2, 7, 300, 100_000])
def test_power_series_sum_within_its_bound(s, m):
    """Σ (1 + k·r)^s in closed form against the terms' exactly rounded sum (math.fsum),
    at the largest r its bound allows (capped at 1/2) and a smaller one: the remainder
    is below 1e-16 of the sum; evaluating (1 + m·r)^(s+1) as exp((s + 1)·log1p(m·r))
    rounds to that exponent's size in units of 1e-16 (a table piece spans a factor of
    a few in keys: a few 1e-16; the line past the last point: up to about 1e-15)."""
    pieces = PowerPieces([0.0], [s])
    for r in (min(pieces.r_max[0], 0.5), 1e-4):
        want = math.fsum((1.0 + k * r) ** s for k in range(m))
        got = power_series_sum(s, r, m, pieces.coefs[0])
        rounding = 4e-16 * max(4.0, (s + 1.0) * math.log1p(m * r))
        assert got == pytest.approx(want, rel=rounding), (r, got, want)


def test_a_tables_pieces_are_the_power_laws_it_reads():
    """``Table.pieces``: between its points the table is t(a)·(x/a)^s, constant below
    the first point, in proportion to x past the last."""
    table = Table([[2, 1e-5], [64, 1.1e-5], [4096, 3e-5], [65536, 2e-4]])
    pieces = table.pieces()
    assert pieces.starts == [0.0, 2.0, 64.0, 4096.0, 65536.0]
    assert pieces.exponents[0] == 0.0 and pieces.exponents[-1] == 1.0
    for j, a in enumerate(pieces.starts):
        a = max(a, 1.0)
        for x in (a * 1.01, a * 1.7):
            if j + 1 < len(pieces.starts) and x >= pieces.starts[j + 1]:
                continue
            assert table.scalar(x) == pytest.approx(
                table.scalar(a) * (x / a) ** pieces.exponents[j], rel=1e-12)


def test_a_single_step_reads_the_tables_of_a_token_and_row_count_once(monkeypatch):
    """A step's dense, all-reduce and LM-head seconds depend only on its new tokens and
    rows: kept per count, a later step of the same counts reads only its attention
    tables, and is priced to the bit as by a model that never saw those counts."""
    shapes = [(300.0, 12.0, 4.0e4, 9.0e3), (300.0, 12.0, 2.5e4, 7.0e3),
              (300.0, 12.0, 0.0, 8.0e3), (64.0, 64.0, 0.0, 3.0e4)]
    fresh = [gpu_8b().step_scalar(*shape) for shape in shapes]
    cost = gpu_8b()
    reads: list[float] = []
    scalar = Table.scalar

    def counted(self, x):
        reads.append(x)
        return scalar(self, x)
    monkeypatch.setattr(Table, "scalar", counted)
    got = [cost.step_scalar(*shape) for shape in shapes]
    assert got == fresh
    # (TP 1: no all-reduce table) dense and head at 300 tokens / 12 rows once, prefill
    # and decode per step, no table for a term with no work, the last step's counts new
    assert reads.count(300.0) == 1 and reads.count(12.0) == 1
    assert len(reads) == (2 + 2) + 2 + 1 + (2 + 1)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_model_with_an_engines_host_time_prices_runs_with_its_own_terms(overlap):
    """A decode run's per-batch terms are kept per model: the copy carrying an engine's
    host time (``with_engine_host``) does not read the terms its original kept, so its
    runs are those of a copy made before the original priced any."""
    made_first = gpu_8b().with_engine_host(3e-3, 2e-5, overlap)
    used = gpu_8b()
    used.decode_run(16, 4_000.0, 50).step_end_s[49]
    made_after = used.with_engine_host(3e-3, 2e-5, overlap)
    for model in (made_first, made_after):
        run = model.decode_run(16, 4_000.0, 50)
        assert run.step_end_s[49] == made_first.decode_run(16, 4_000.0, 50).step_end_s[49]
    assert (made_after.decode_run(16, 4_000.0, 50).step_end_s[49]
            != used.decode_run(16, 4_000.0, 50).step_end_s[49])
