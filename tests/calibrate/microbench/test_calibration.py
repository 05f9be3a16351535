"""Calibrated step-time cost models: the shipped CPU profile against the model it
describes, the tables' interpolation, profile validation, a scenario end to end,
and a quick calibration run."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import sim
from sim.config import profiles
from sim.cost.calibrated import CalibratedConfig, CalibratedCostModel
from sim.cost.profile_file import load_profile, resolve_profile_path
from sim.cost.tables import Table
from sim.cost.shape import BatchShape
from sim.config.paths import data_dir

from simfactories import make_pool, make_scenario, single, single_service_time_s

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = "calibrated/cpu/tiny-llama.yaml"
TERMS = ("dense", "attn_prefill", "attn_decode", "lm_head", "tp_comm")


def tiny_cost(profile: str = SHIPPED, *, model: str = "tiny-llama", hardware: str = "cpu",
              tp: int = 1, base_dir=None) -> CalibratedCostModel:
    return CalibratedCostModel(profiles.find_model(model), profiles.find_hardware(hardware), tp,
                               "bf16", "bf16", CalibratedConfig(profile=profile),
                               base_dir=base_dir)


@pytest.fixture(scope="module")
def shipped() -> dict:
    return load_profile(resolve_profile_path(SHIPPED))


# -- the shipped profile --------------------------------------------------------------
def test_shipped_profile_describes_tiny_llama(shipped):
    spec = profiles.find_model("tiny-llama")
    assert shipped["device"] == "cpu" and shipped["tp"] == 1 and shipped["dtype"] == "fp32"
    assert shipped["model"]["num_layers"] == spec.num_layers == 8
    assert shipped["model"]["hidden_size"] == spec.hidden_size
    assert not shipped["quick"]
    assert {"torch_version", "date", "note", "overhead", "held_back_error"} <= set(shipped)
    assert "layer count" in shipped["note"] and "TP shards" in shipped["note"]
    png = resolve_profile_path(SHIPPED).with_suffix(".png")
    log = resolve_profile_path(SHIPPED).with_suffix(".log")
    assert png.stat().st_size > 10_000 and "held-back error" in log.read_text()


def test_shipped_tables_are_monotone(shipped):
    for term in TERMS:
        rows = shipped["tables"][term]
        xs = [r[0] for r in rows]
        ts = [r[1] for r in rows]
        assert all(b > a for a, b in zip(xs, xs[1:])), term
        assert all(b >= a for a, b in zip(ts, ts[1:])), term
        assert all(t >= 0 for t in ts), term
    assert shipped["tables"]["dense"][0][0] == 1
    assert shipped["tables"]["dense"][-1][0] >= 2048
    # the model's terms are non-decreasing on a fine grid, in and past the tables
    cost = tiny_cost()
    grid = np.geomspace(0.5, 1e8, 400)
    for fn in (cost.dense_s, cost.attn_prefill_s, cost.attn_decode_s, cost.lm_head_s):
        assert np.all(np.diff(fn(grid)) >= 0)


# -- interpolation ---------------------------------------------------------------------
ROWS = [[1, 1e-3], [10, 2e-3], [100, 2e-3], [1000, 1e-2]]


def test_table_hits_its_points_and_interpolates_in_log_space():
    t = Table(ROWS)
    for x, s in ROWS:
        assert t(x) == pytest.approx(s) and t.scalar(x) == pytest.approx(s)
    # halfway in log x is the geometric mean in time
    assert t(math.sqrt(1 * 10)) == pytest.approx(math.sqrt(1e-3 * 2e-3))
    assert t(math.sqrt(100 * 1000)) == pytest.approx(math.sqrt(2e-3 * 1e-2))
    assert t(30) == pytest.approx(2e-3)                      # flat stretch stays flat


def test_table_below_first_point_and_at_zero():
    t = Table(ROWS)
    assert t(0.25) == pytest.approx(1e-3) and t.scalar(0.25) == pytest.approx(1e-3)
    assert t(0.0) == 0.0 and t.scalar(0.0) == 0.0           # no work, no kernel


def test_table_extrapolates_in_proportion_to_x():
    t = Table(ROWS)
    assert t(2000) == pytest.approx(2e-2)
    assert t.scalar(1e6) == pytest.approx(1e-2 * 1000)
    assert t(np.array([1000, 4000]))[1] == pytest.approx(4e-2)


def test_table_scalar_equals_vectorised():
    t = Table(ROWS)
    x = np.concatenate([[0.0, 0.3, 1.0, 1000.0], np.random.default_rng(0).uniform(0, 5000, 300)])
    assert np.allclose([t.scalar(v) for v in x], t(x), rtol=1e-12, atol=0)


@pytest.mark.parametrize("rows, match", [
    ([], "empty"),
    ([[1, 1e-3], [1, 2e-3]], "increasing"),
    ([[1, 2e-3], [2, 1e-3]], "non-decreasing"),
    ([[0, 1e-3], [2, 2e-3]], "positive"),
])
def test_table_rejects_bad_rows(rows, match):
    with pytest.raises(ValueError, match=match):
        Table(rows)


def test_fit_tables_are_monotone_and_agree_with_the_simulator():
    from calibrate.fitting.tables import evaluate, fit_term, isotonic, make_table
    rng = np.random.default_rng(1)
    x = np.arange(1, 41, dtype=float)
    noisy = 1e-3 * (1 + x / 10) * rng.lognormal(0, 0.2, x.size)
    table = make_table(list(zip(x, noisy)))
    ts = [r[1] for r in table]
    assert all(b >= a for a, b in zip(ts, ts[1:]))
    grid = np.geomspace(0.5, 400, 200)
    assert np.allclose(evaluate(table, grid), Table(table)(grid), rtol=1e-12)
    assert isotonic([3.0, 1.0, 2.0, 5.0]) == [2.0, 2.0, 2.0, 5.0]
    fit = fit_term(list(zip(x, noisy)), k=4)
    assert [r[0] for r in fit.held_back] == [4.0, 8.0, 12.0, 16.0, 20.0, 24.0, 28.0, 32.0, 36.0]
    assert fit.errors()["points"] == 9 and fit.errors()["max"] < 1.0


def test_overhead_fit_is_non_negative():
    from calibrate.fitting.tables import fit_overhead, split_per_seq
    seqs = np.array([1.0, 4, 16, 64])
    terms = np.array([1.0, 2.0, 3.0, 4.0]) * 1e-3
    const, slope = fit_overhead(terms + 2e-4 + 1e-5 * seqs, terms, seqs)
    assert const == pytest.approx(2e-4, rel=1e-6) and slope == pytest.approx(1e-5, rel=1e-6)
    assert fit_overhead(terms * 0.5, terms, seqs) == (0.0, 0.0)      # terms over-explain
    batch = np.array([1.0, 8, 64, 1, 8, 64])
    kv = np.array([100.0, 800, 6400, 1000, 8000, 64000])
    alpha, adjusted = split_per_seq(batch, kv, 3e-6 * batch + 1e-8 * kv + 1e-5)
    assert alpha == pytest.approx(3e-6, rel=1e-6)
    assert np.allclose(adjusted, 1e-8 * kv + 1e-5)


# -- the cost model --------------------------------------------------------------------
def test_step_time_composes_the_terms(shipped):
    cost = tiny_cost()
    tables = {t: Table(shipped["tables"][t]) for t in TERMS}
    over = shipped["overhead"]
    n, s, w, kv = 300.0, 5.0, 300 * 40.0, 5 * 700.0
    expect = (over["constant_s"] + over["per_seq_s"] * s
              + 8 * (tables["dense"].scalar(n) + tables["attn_prefill"].scalar(w)
                     + tables["attn_decode"].scalar(kv) + tables["tp_comm"].scalar(n))
              + tables["lm_head"].scalar(s))
    t, flops, moved = cost.step_scalar(n, s, w, kv)
    assert t == pytest.approx(expect, rel=1e-12)
    shape = BatchShape(np.array([n, 1.0]), np.array([s, 1.0]), np.array([w, 0.0]),
                       np.array([kv, 0.0]))
    assert cost.step_time_s(shape)[0] == pytest.approx(t, rel=1e-12)
    assert flops > 0 and moved > 0
    assert cost.step(shape).flops[0] == pytest.approx(flops)
    assert cost.decode_time_linear is False
    # fast-forward's vectorised decode run equals step-by-step evaluation
    run = cost.decode_run(8, 8 * 300.0, 50)
    each = [cost.step_scalar(8.0, 8.0, 0.0, 8 * 300.0 + 8 * i)[0] for i in range(50)]
    ends = np.array([run.step_end_s[i] for i in range(len(run.step_end_s))])
    assert np.allclose(ends, np.cumsum(each), rtol=1e-12)


def test_profile_is_found_relative_to_a_base_dir_or_the_shipped_folder(tmp_path):
    shipped_path = data_dir("profiles") / SHIPPED
    assert resolve_profile_path(SHIPPED) == shipped_path
    local = tmp_path / "mine.yaml"
    local.write_text(shipped_path.read_text())
    assert tiny_cost("mine.yaml", base_dir=tmp_path).path == local
    with pytest.raises(ValueError, match="not found"):
        tiny_cost("calibrated/cpu/nope.yaml")


def test_profile_must_match_the_pools_model_and_tp(tmp_path):
    with pytest.raises(ValueError, match="llama-3.1-8b.*num_layers 8 vs 32"):
        tiny_cost(model="llama-3.1-8b", hardware="H100-SXM")
    with pytest.raises(ValueError, match="tp=1 but the pool runs tp=2"):
        tiny_cost(hardware="H100-SXM", tp=2)
    data = yaml.safe_load((data_dir("profiles") / SHIPPED).read_text())
    data["tables"]["dense"][3][1] = 10.0                     # not monotone any more
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match="tables.dense.*non-decreasing"):
        tiny_cost(str(bad))
    bad.write_text("name: not a profile\n")
    with pytest.raises(ValueError, match="not a calibrated profile"):
        tiny_cost(str(bad))


def test_scenario_with_a_calibrated_pool_runs_end_to_end(trace_stream):
    pool = make_pool(model="tiny-llama", hardware="cpu", scheduler=single(), weight_dtype="fp32",
                     cost_model={"type": "calibrated", "profile": SHIPPED})
    scenario = make_scenario(stream=trace_stream([(0.0, 300, 20), (100.0, 1000, 5)]),
                             pool=pool, duration=200)
    assert type(scenario.pools["p"].cost_model) is CalibratedConfig
    results = sim.run(scenario)
    req = results.requests.sort_values("arrival_s")
    assert (req["status"] == "completed").all()
    cost = tiny_cost()
    for (_, row), (prompt, out) in zip(req.iterrows(), [(300, 20), (1000, 5)]):
        assert row["e2e_s"] == pytest.approx(single_service_time_s(cost, prompt, out), rel=1e-9)
    # and continuous batching with fast-forward on the same profile
    pool = make_pool(model="tiny-llama", hardware="cpu", weight_dtype="fp32",
                     cost_model={"type": "calibrated", "profile": SHIPPED})
    results = sim.run(make_scenario(stream={"arrival": {"type": "poisson", "rate": 1.0},
                                            "prompt_tokens": 200, "output_tokens": 30},
                                    pool=pool, duration=30))
    assert (results.requests["status"] == "completed").all()
    assert results.summary["pools"]["p"]["mfu"] > 0


def test_unknown_cost_model_keys_are_rejected():
    pool = make_pool(model="tiny-llama", hardware="cpu",
                     cost_model={"type": "calibrated", "profile": SHIPPED, "tabel": 1})
    with pytest.raises(Exception, match="tabel"):
        make_scenario(pool=pool)


def test_import_sim_does_not_import_torch():
    code = ("import sys, sim, sim.cost.calibrated, sim.core.pool, sim.cli; "
            "print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


# -- calibration (torch) -----------------------------------------------------------------
def test_shard_shapes():
    pytest.importorskip("torch")
    from calibrate.fitting.shapes import ShardShape, load_model
    shard = ShardShape(load_model("llama-3.1-70b"), 4)
    assert (shard.heads, shard.kv_heads, shard.ffn, shard.hidden) == (16, 2, 7168, 8192)
    assert ShardShape(load_model("llama-3.1-8b"), 8).kv_heads == 1
    with pytest.raises(ValueError, match="does not divide"):
        ShardShape(load_model("tiny-llama"), 3)


def test_model_shapes_read_without_the_simulator():
    """On a host without the simulator's dependencies calibration reads the YAML itself."""
    pytest.importorskip("torch")
    from calibrate.fitting.shapes import ModelShape, _yaml_models, load_model
    for name in ("tiny-llama", "llama-3.1-70b", "mixtral-8x7b"):
        assert ModelShape.from_mapping(_yaml_models()[name]) == load_model(name)


def test_moe_layer_benchmarks():
    pytest.importorskip("torch")
    from calibrate.microbench import bench
    from calibrate.microbench import timing
    from calibrate.fitting.shapes import ModelShape, ShardShape
    moe = ModelShape(name="tiny-moe", num_layers=2, hidden_size=128, num_heads=4,
                     num_kv_heads=2, head_dim=32, ffn_size=256, vocab_size=1000,
                     num_experts=4, experts_per_token=2)
    s = timing.Settings(quick=True, rounds=1, point_budget_s=0.001)
    timing.setup(s)
    points = bench.bench_dense(ShardShape(moe, 2), s, [1, 8, 64], timing.Timer(s))
    assert [p.x for p in points] == [1, 8, 64] and all(p.seconds > 0 for p in points)


def test_quick_calibration_writes_a_profile_the_simulator_loads(tmp_path, capsys):
    pytest.importorskip("torch")
    from sim.cli import main
    assert main(["calibrate", "--model", "tiny-llama", "--tp", "2", "--quick",
                 "--out", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "held-back relative error" in out and "whole_forward" in out
    path = tmp_path / "tiny-llama-tp2.yaml"
    for suffix in (".png", ".log"):
        assert path.with_suffix(suffix).stat().st_size > 0
    data = yaml.safe_load(path.read_text())
    assert data["tp"] == 2 and data["quick"] and data["tp_comm_measured"] is False
    cost = tiny_cost(str(path), hardware="H100-SXM", tp=2)
    # an all-reduce that was not measured comes from the roofline of the interconnect
    assert cost.tp_comm_s(np.array([64.0]))[0] > 0
    t = cost.step_scalar(64.0, 1.0, 64 * 32.0, 0.0)[0]
    assert math.isfinite(t) and t > 0          # no bound: the quick run times this CPU
    assert main(["calibrate", "--model", "no-such-model", "--quick",
                 "--out", str(tmp_path)]) == 2
    assert "unknown model" in capsys.readouterr().err


def test_gpu_run_script_quick_mode(tmp_path):
    """calibrate/gpu_run.sh's smoke mode: tiny shapes on whatever device there is."""
    pytest.importorskip("torch")
    env = {**os.environ, "CALIBRATE_QUICK": "1", "CALIBRATE_JOBS": "tiny-llama:2",
           "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(ROOT / "calibrate" / "gpu_run.sh"), str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all done" in (tmp_path / "gpu_run.log").read_text()
    data = yaml.safe_load((tmp_path / "tiny-llama-tp2.yaml").read_text())
    assert data["tp"] == 2 and data["quick"]
    assert tiny_cost(str(tmp_path / "tiny-llama-tp2.yaml"), hardware="H100-SXM",
                     tp=2).step_scalar(8.0, 8.0, 0.0, 800.0)[0] > 0


def test_machine_speed_needs_points_the_profile_measured():
    pytest.importorskip("torch")
    from calibrate.microbench.check import machine_speed
    with pytest.raises(ValueError, match=r"no dense point at \[2\] tokens"):
        machine_speed({"measured": {"dense": [[1, 0.1], [4, 0.2]]}}, tokens=(1, 2))


@pytest.mark.parametrize("name", ["../../escaped-model", "/tmp/abs-escape", ".hidden", "a/b"])
def test_a_profile_file_name_is_never_a_path(name):
    """The file name comes from the model's name, which a model file may set to anything
    printable: it is reduced to one safe name inside the output folder."""
    from calibrate.microbench.run import profile_stem
    for tp in (1, 2):
        stem = profile_stem(name, tp)
        assert "/" not in stem and not stem.startswith(".") and stem not in ("", "..")
