"""Validation against a real engine: the engine terms of the cost model, the fit of
those terms and the engines themselves. Nothing here bounds a time: the timed comparison
is ``make validate``; the fit and the comparison on recorded engine runs are in
``test_validate_recorded.py``."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

import sim
from sim.config import profiles
from sim.cost.calibrated import CalibratedConfig, CalibratedCostModel
from sim.cost.profile_file import check_profile, load_profile, resolve_profile_path
from sim.cost.shape import BatchShape, default_kv_read

from simfactories import make_pool, make_scenario

ROOT = Path(__file__).resolve().parents[4]
SHIPPED = "calibrated/cpu/tiny-llama.yaml"
ENGINE = {"constant_s": 0.001, "per_seq_s": 0.0002, "per_prefill_step_s": 0.004,
          "per_kv_token_s": [[1, 2e-6], [64, 1e-5], [512, 6e-5]]}


def per_key_s(q: float) -> float:
    """ENGINE's seconds per key for q new tokens, worked out by hand."""
    import math
    if q <= 64:
        return 2e-6 + 8e-6 * math.log(q) / math.log(64)
    if q <= 512:
        return 1e-5 + 5e-5 * math.log(q / 64) / math.log(8)
    return 6e-5 * q / 512


def _profile_with_engine(tmp_path: Path, engine: dict | None) -> Path:
    data = copy.deepcopy(load_profile(resolve_profile_path(SHIPPED)))
    if engine is not None:
        data["engine"] = engine
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _cost(path: Path) -> CalibratedCostModel:
    return CalibratedCostModel(profiles.find_model("tiny-llama"), profiles.find_hardware("cpu"),
                               1, "fp32", "fp32", CalibratedConfig(profile=str(path)))


# -- the engine terms in the cost model ------------------------------------------------------
def test_engine_terms_add_per_step_seq_key_and_pair(tmp_path):
    plain = _cost(_profile_with_engine(tmp_path, None))
    engine = _cost(_profile_with_engine(tmp_path, ENGINE))
    # 3 decodes with 100 keys each plus a 50-token chunk after 200 cached tokens
    tokens, seqs, kv_read = 53.0, 4.0, 300.0 + 250.0
    args = (tokens, seqs, 50 * (200 + 25.0), 303.0)
    extra = engine.step_scalar(*args, kv_read)[0] - plain.step_scalar(*args, kv_read)[0]
    want = (ENGINE["constant_s"] + seqs * ENGINE["per_seq_s"] + ENGINE["per_prefill_step_s"]
            + kv_read * per_key_s(tokens))
    assert extra == pytest.approx(want, rel=1e-9)
    # past the last point a key costs in proportion to the new tokens
    big = engine.step_scalar(1024.0, 1.0, 1024 * 512.0, 0.0, 1024.0)[0] - plain.step_scalar(
        1024.0, 1.0, 1024 * 512.0, 0.0, 1024.0)[0]
    assert big == pytest.approx(0.001 + 0.0002 + 0.004 + 1024 * 6e-5 * 2, rel=1e-9)


def test_engine_terms_vectorised_equal_scalar(tmp_path):
    cost = _cost(_profile_with_engine(tmp_path, ENGINE))
    n, kv = np.array([1.0, 8.0, 64.0, 700.0]), np.array([300.0, 2400.0, 9000.0, 900.0])
    work = np.array([0.0, 0.0, 5000.0, 0.0])
    shape = BatchShape(n, n, work, kv)
    vec = cost.step_time_s(shape)
    assert vec == pytest.approx([cost.step_scalar(a, a, w, b)[0] for a, w, b in zip(n, work, kv)],
                                rel=1e-12)
    for packed in (False, True):          # a fast-forwarded decode run, step by step
        (tmp_path / f"run-{packed}").mkdir()
        cost = _cost(_profile_with_engine(tmp_path / f"run-{packed}",
                                          {**ENGINE, "replaces_attention": packed}))
        run = cost.decode_run(6, 6 * 250.0, 40)
        each = [cost.step_scalar(6.0, 6.0, 0.0, 6 * 250.0 + 6 * i)[0] for i in range(40)]
        assert [run.step_end_s[i] for i in range(40)] == pytest.approx(np.cumsum(each),
                                                                     rel=1e-12)
        flops = [cost.step_scalar(6.0, 6.0, 0.0, 6 * 250.0 + 6 * i)[1] for i in (0, 1)]
        assert (run.flops_first, run.flops_slope) == pytest.approx(
            (flops[0], flops[1] - flops[0]), rel=1e-9)


def test_default_keys_read_are_exact_for_decodes_and_whole_prompts():
    assert default_kv_read(8.0, 8.0, 800.0) == 800.0           # 8 decodes
    assert default_kv_read(300.0, 1.0, 0.0) == 300.0           # one whole prompt
    assert default_kv_read(0.0, 0.0, 0.0) == 0.0


def test_model_scale_multiplies_the_profiles_terms_not_the_engines(tmp_path):
    """A decode step of the plain profile, slowed by model_scale, plus the engine's own
    seconds unscaled."""
    plain = _cost(resolve_profile_path(SHIPPED))
    eng = {"constant_s": 0.002, "per_seq_s": 0.0, "per_prefill_step_s": 0.0}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = _cost(_profile_with_engine(tmp_path / "a", {**eng, "model_scale": 1.0}))
    two = _cost(_profile_with_engine(tmp_path / "b", {**eng, "model_scale": 2.0}))
    t0 = plain.step_scalar(8.0, 8.0, 0.0, 900.0)[0]
    assert one.step_scalar(8.0, 8.0, 0.0, 900.0)[0] == pytest.approx(t0 + 0.002, rel=1e-9)
    assert two.step_scalar(8.0, 8.0, 0.0, 900.0)[0] == pytest.approx(2 * t0 + 0.002, rel=1e-9)


def test_profile_without_engine_block_is_unchanged(tmp_path):
    a = _cost(_profile_with_engine(tmp_path, None))
    b = _cost(resolve_profile_path(SHIPPED))
    assert a.step_scalar(40.0, 8.0, 1000.0, 900.0)[0] == b.step_scalar(40.0, 8.0, 1000.0,
                                                                         900.0)[0]


@pytest.mark.parametrize("change, match", [
    ({"per_seq_s": -1e-6}, "engine.per_seq_s must be a number >= 0"),
    ({"constant_s": True}, "engine.constant_s must be a number >= 0"),
    ({"per_kv_token_s": 3e-6}, "must be a list of \\[new tokens, seconds per key\\] pairs"),
    ({"per_kv_token_s": [[4, 1e-6], [2, 1e-6]]}, "strictly increasing"),
    ({"per_kv_token_s": [[1, -1e-6]]}, "finite and >= 0"),
    ({"model_scale": 0}, "engine.model_scale must be a number > 0"),
    ({"model_scale": "fast"}, "engine.model_scale must be a number > 0"),
])
def test_engine_terms_are_checked(change, match):
    data = copy.deepcopy(load_profile(resolve_profile_path(SHIPPED)))
    data["engine"] = {**ENGINE, **change}
    with pytest.raises(ValueError, match=match):
        check_profile(data, profiles.find_model("tiny-llama"), 1, "p.yaml")


def test_continuous_scheduler_passes_the_keys_it_reads(tmp_path, trace_stream):
    """A lone prompt chunked over two steps: the second chunk reads the first's keys too,
    which the packed-attention term charges (and the plain profile does not)."""
    prompt, budget = 600, 512
    path = _profile_with_engine(tmp_path, {"per_kv_token_s": [[1, 1e-6], [512, 512e-6]]})
    pool = make_pool(model="tiny-llama", hardware="cpu", weight_dtype="fp32", kv_dtype="fp32",
                     scheduler={"type": "continuous", "max_num_batched_tokens": budget,
                                "max_num_seqs": 8},
                     cost_model={"type": "calibrated", "profile": str(path)})
    scen = make_scenario(stream=trace_stream([(0.0, prompt, 1)]), pool=pool, duration=10)
    ttft = sim.run(scen).requests["ttft_s"].iloc[0]
    base = _cost(_profile_with_engine(tmp_path / "plain", None) if (tmp_path / "plain").mkdir()
                 is None else None)
    first = base.step_scalar(budget, 1, budget * budget / 2, 0.0)[0] + 512e-6 * budget
    rest = prompt - budget
    import math
    per_key = 1e-6 + 511e-6 * math.log(rest) / math.log(512)
    second = (base.step_scalar(rest, 1, rest * (budget + rest / 2), 0.0)[0]
              + per_key * prompt)
    assert ttft == pytest.approx(first + second, rel=1e-9)


@pytest.mark.parametrize("scheduler", [
    {"type": "continuous", "max_num_batched_tokens": 512, "max_num_seqs": 8},
    {"type": "single"}])
def test_a_step_after_an_idle_engine_costs_after_idle_s(tmp_path, trace_stream, scheduler):
    """Three requests: the first finds a new (idle) replica, the second arrives while the
    first runs, the third a second after both ended. Only the first and third prefills
    are charged after_idle_s."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    extra = 0.05
    ttft = {}
    for name, idle_s in (("a", 0.0), ("b", extra)):
        path = _profile_with_engine(tmp_path / name, {"constant_s": 0.0, "after_idle_s": idle_s})
        pool = make_pool(model="tiny-llama", hardware="cpu", weight_dtype="fp32",
                         kv_dtype="fp32", scheduler=scheduler,
                         cost_model={"type": "calibrated", "profile": str(path)})
        stream = trace_stream([(0.0, 64, 20), (0.001, 32, 4), (5.0, 64, 20)])
        req = sim.run(make_scenario(stream=stream, pool=pool, duration=10)).requests
        ttft[name] = req.sort_values("request_id")["ttft_s"].to_numpy()
    added = ttft["b"] - ttft["a"]
    assert added[0] == pytest.approx(extra, rel=1e-9)
    assert added[2] == pytest.approx(extra, rel=1e-9)
    # the second waited through the first's extra second in either scheduler, but its own
    # admission step (continuous) or prefill (single) follows a busy step
    assert added[1] == pytest.approx(extra, rel=1e-9)


# -- the fit of the engine terms --------------------------------------------------------------
def _rows(seed: int = 0, scale: float = 1.0):
    from calibrate.engines.hf.engine import EngineStep
    from calibrate.engines.step_fit import StepRows, engine_seconds, profile_seconds
    rng = np.random.default_rng(seed)
    profile = load_profile(resolve_profile_path(SHIPPED))
    steps = []
    for g in range(60):
        batch = int(rng.integers(1, 17))
        ctx = int(rng.integers(10, 800))
        q = 1 if g % 3 else int(rng.integers(16, 240))
        seqs = tuple((q if i == 0 else 1, ctx + i, i == 0 and q > 1) for i in range(batch))
        steps.append((g, EngineStep(0.0, 1.0, seqs, 1.0 if g % 4 == 1 else 0.0)))
    rows = StepRows.from_steps(steps)
    rows.seconds = scale * profile_seconds(profile, rows) + engine_seconds(TRUTH, rows)
    return profile, rows


TRUTH = {"constant_s": 0.001, "per_seq_s": 0.0002, "per_prefill_step_s": 0.003,
         "after_idle_s": 0.02,
         "per_kv_token_s": [[1, 2e-6], [2, 4e-6], [4, 5e-6], [8, 6e-6], [16, 7e-6],
                            [32, 9e-6], [64, 1.2e-5], [128, 2e-5], [256, 3.5e-5]]}


def test_step_rows_count_tokens_seqs_and_keys():
    from calibrate.engines.hf.engine import EngineStep
    from calibrate.engines.step_fit import StepRows
    step = EngineStep(0.0, 0.5, ((1, 99, False), (1, 49, False), (40, 10, True), (1, 7, True)))
    rows = StepRows.from_steps([(0, step)])
    assert rows.num_tokens[0] == 43 and rows.num_seqs[0] == 4
    assert rows.decode_kv_tokens[0] == 100 + 50
    # a prompt's last chunk of one token is prefill, as the simulator counts it
    assert rows.prefill_attn_work[0] == 40 * (10 + 20) + 1 * (7 + 0.5)
    assert rows.kv_read_tokens[0] == 100 + 50 + 50 + 8
    assert rows.seconds[0] == 0.5


def test_fit_recovers_engine_terms_from_exact_steps():
    from calibrate.engines.step_fit import fit_rows
    profile, rows = _rows()
    fit = fit_rows(profile, rows, 256)
    assert fit.engine["constant_s"] == pytest.approx(TRUTH["constant_s"], rel=1e-3)
    assert fit.engine["per_seq_s"] == pytest.approx(TRUTH["per_seq_s"], rel=1e-3)
    assert fit.engine["per_prefill_step_s"] == pytest.approx(TRUTH["per_prefill_step_s"],
                                                             rel=1e-3)
    assert fit.engine["after_idle_s"] == pytest.approx(TRUTH["after_idle_s"], rel=1e-3)
    assert [q for q, _ in fit.engine["per_kv_token_s"]] == [q for q, _ in TRUTH["per_kv_token_s"]]
    assert fit.all_steps["max"] < 1e-3 and fit.held_back["max"] < 1e-2
    assert fit.without_engine["median"] > 0.01
    assert fit.engine["model_scale"] == pytest.approx(1.0, rel=1e-3)


def test_fit_measures_a_machine_slower_than_at_calibration():
    """The machine runs the profile's layers 1.8 times slower than when it was measured:
    the fit finds the factor and the same engine terms, and predicts the steps exactly."""
    from calibrate.engines.step_fit import fit_rows
    profile, rows = _rows(scale=1.8)
    fit = fit_rows(profile, rows, 256)
    assert fit.engine["model_scale"] == pytest.approx(1.8, rel=1e-3)
    assert fit.engine["constant_s"] == pytest.approx(TRUTH["constant_s"], rel=1e-2)
    assert fit.all_steps["max"] < 1e-3


def test_fit_drops_step_sizes_it_never_saw():
    """Knots of the per-key table with no step near them are left out, not set to zero."""
    from calibrate.engines.step_fit import fit_rows
    profile, rows = _rows(2)
    fit = fit_rows(profile, rows, 4096)
    knots = [q for q, _ in fit.engine["per_kv_token_s"]]
    assert 1 in knots and 4096 not in knots and 2048 not in knots
    assert all(v > 0 for _, v in fit.engine["per_kv_token_s"])


def test_fitted_formula_is_the_simulators(tmp_path):
    """The fit's prediction of a step equals the simulator's cost model on its profile."""
    from calibrate.engines.step_fit import StepRows, predicted_seconds
    from calibrate.engines.hf.engine import EngineStep
    for packed, scale in ((False, 1.0), (True, 1.0), (False, 1.7), (True, 0.6)):
        engine = {**ENGINE, "replaces_attention": packed, "model_scale": scale}
        cost = _cost(_profile_with_engine(tmp_path, engine))
        profile = load_profile(resolve_profile_path(SHIPPED))
        rng = np.random.default_rng(5)
        for _ in range(50):
            seqs = tuple((int(rng.integers(1, 300)) if p else 1, int(rng.integers(0, 900)), p)
                         for p in rng.random(int(rng.integers(1, 12))) < 0.3)
            rows = StepRows.from_steps([(0, EngineStep(0.0, 1.0, seqs))])
            fit_s = predicted_seconds(profile, engine, rows)[0]
            sim_s = cost.step_scalar(rows.num_tokens[0], rows.num_seqs[0],
                                     rows.prefill_attn_work[0], rows.decode_kv_tokens[0],
                                     rows.kv_read_tokens[0])[0]
            assert sim_s == pytest.approx(fit_s, rel=1e-9)


# -- validation scenarios ----------------------------------------------------------------------
def _scenario(tmp_path: Path, **pool_changes) -> Path:
    data = yaml.safe_load((ROOT / "scenarios" / "validate" / "smoke.yaml").read_text())
    data["pools"]["engine"]["cost_model"]["profile"] = str(
        resolve_profile_path(SHIPPED).resolve())
    data["pools"]["engine"].update(pool_changes)
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_validation_scenario_gives_the_engine_the_pools_limits(tmp_path):
    pytest.importorskip("torch")
    from calibrate.engines.hf import draw_requests, load_workload
    w = load_workload(_scenario(tmp_path))
    assert w.kind == "continuous"
    assert (w.limits.max_batch_tokens, w.limits.max_requests_per_batch,
            w.limits.page_size) == (512, 32, 16)
    assert w.limits.num_blocks == 512 * 2 ** 20 // (16 * 2 * 8 * 4 * 64 * 4)
    reqs = draw_requests(w)
    ran = sim.run(sim.load_scenario(_scenario(tmp_path))).requests.sort_values("request_id")
    assert [r.prompt_tokens for r in reqs] == ran["prompt_tokens"].tolist()
    assert [r.arrival_s for r in reqs] == pytest.approx(ran["arrival_s"].tolist())


@pytest.mark.parametrize("change, match", [
    ({"replicas": 2}, "one replica at tp 1"),
    ({"scheduler": {"type": "static", "batch_size": 4}}, "'continuous' and 'single'"),
    ({"scheduler": {"type": "continuous", "max_num_batched_tokens": 512,
                    "chunked_prefill": False}}, "chunked prefill"),
    ({"cost_model": {"type": "roofline"}}, "calibrated cost model"),
])
def test_validation_scenario_rejects_what_the_engine_cannot_be(tmp_path, change, match):
    pytest.importorskip("torch")
    from calibrate.engines.hf import ValidationError, load_workload
    path = _scenario(tmp_path, **change)
    with pytest.raises(ValidationError, match=match):
        load_workload(path)


def test_figures_from_request_times():
    from calibrate.engines.hf import figures
    f = figures([0.0, 1.0], [0.1, 1.3], [1.1, 2.3], [11, 3])
    assert f["ttft_p50_s"] == pytest.approx(0.2)
    assert f["tpot_p50_s"] == pytest.approx((0.1 + 0.5) / 2)
    assert f["output_tokens_per_s"] == pytest.approx(14 / 2.3)


def test_pooled_figures_take_percentiles_over_all_replays_and_throughput_over_their_spans():
    """Two replays of one request each: the pooled TTFT median lies between the two, and
    throughput is all tokens over the two spans added, not over the first arrival to the
    last finish of the two together (they ran one after the other)."""
    from calibrate.engines.hf import pooled_figures
    f = pooled_figures([([0.0], [0.1], [1.1], [11]), ([100.0], [100.3], [102.3], [21])])
    assert f["ttft_p50_s"] == pytest.approx(0.2)
    assert f["output_tokens_per_s"] == pytest.approx(32 / (1.1 + 2.3))


def test_cli_refuses_zero_replays(tmp_path, capsys):
    from sim.cli import main
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(_scenario(tmp_path)), "--replays", "0"])
    assert exc.value.code == 2
    assert "--replays" in capsys.readouterr().err


def test_cli_names_a_bad_validation_scenario(tmp_path, capsys):
    pytest.importorskip("torch")
    from sim.cli import main
    code = main(["validate", str(_scenario(tmp_path, replicas=3)), "--out",
                 str(tmp_path / "out")])
    assert code == 2
    assert "one replica at tp 1" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# -- the engines ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_shape():
    pytest.importorskip("transformers")
    from calibrate.fitting.shapes import load_model
    return load_model("tiny-llama")


def test_continuous_engine_serves_exact_lengths_within_its_limits(tiny_shape):
    from calibrate.engines.hf.engine import ContinuousEngine, ContinuousLimits, EngineRequest
    limits = ContinuousLimits(max_batch_tokens=64, max_requests_per_batch=3, page_size=16,
                              num_blocks=64)
    engine = ContinuousEngine(tiny_shape, limits)
    reqs = [EngineRequest(0.0, 100, 5), EngineRequest(0.0, 20, 3), EngineRequest(0.02, 30, 4),
            EngineRequest(0.03, 10, 2)]
    records = engine.run(reqs)
    for req, rec in zip(reqs, records):
        assert rec.arrival_s <= rec.first_token_s <= rec.finish_s
        assert rec.arrival_s >= req.arrival_s - 1e-3
    assert engine.steps, "every step is logged"
    for step in engine.steps:
        assert sum(q for q, _, _ in step.seqs) <= limits.max_batch_tokens
        assert len(step.seqs) <= limits.max_requests_per_batch
    # the 100-token prompt needs two chunks of the 64-token budget
    assert sum(q for s in engine.steps for q, c, p in s.seqs if p) == 100 + 20 + 30 + 10


def test_continuous_engine_logs_each_steps_new_tokens_and_context(tiny_shape):
    """One 100-token prompt under a 64-token budget: chunks (64, 0) and (36, 64), then
    one decode per further output token with the context grown by one."""
    from calibrate.engines.hf.engine import ContinuousEngine, ContinuousLimits, EngineRequest
    engine = ContinuousEngine(tiny_shape, ContinuousLimits(64, 4, 16, 64))
    engine.run([EngineRequest(0.0, 100, 4)])
    assert [s.seqs for s in engine.steps] == [((64, 0, True),), ((36, 64, True),),
                                             ((1, 100, False),), ((1, 101, False),),
                                             ((1, 102, False),)]
    assert all(0 <= a.start_s < a.end_s <= b.start_s
               for a, b in zip(engine.steps, engine.steps[1:]))


def test_two_engines_log_their_own_steps(tiny_shape):
    """Several engines may be up at once; each logs only its own steps."""
    from calibrate.engines.hf.engine import ContinuousEngine, ContinuousLimits, EngineRequest
    a = ContinuousEngine(tiny_shape, ContinuousLimits(64, 4, 16, 64))
    b = ContinuousEngine(tiny_shape, ContinuousLimits(32, 2, 16, 32))
    with a, b:
        a.run([EngineRequest(0.0, 10, 3)])
        b.run([EngineRequest(0.0, 40, 2)])
    assert [s.seqs for s in a.steps] == [((10, 0, True),), ((1, 10, False),),
                                        ((1, 11, False),)]
    assert [s.seqs for s in b.steps] == [((32, 0, True),), ((8, 32, True),),
                                        ((1, 40, False),)]


def test_logging_an_engines_steps_leaves_transformers_classes_and_objects_as_they_were(
        tiny_shape):
    """The step log is the engine's own manager (a subclass): transformers' batch
    processor keeps its own methods, and no attribute of ours is set on its objects."""
    from transformers.generation.continuous_batching import continuous_api as ca

    from calibrate.engines.hf.engine import ContinuousEngine, ContinuousLimits, EngineRequest
    methods = {name: ca.ContinuousBatchProcessor.__dict__[name]
               for name in ("prepare_next_batch", "update_batch")}
    engine = ContinuousEngine(tiny_shape, ContinuousLimits(64, 4, 16, 64))
    with engine:
        engine.run([EngineRequest(0.0, 10, 3)])
        processor = engine._mgr.batch_processor
        ours = [k for obj in (processor, processor.scheduler) for k in vars(obj)
                if "fleetsim" in k or k == "schedule_batch"]
    assert engine.steps
    assert {name: ca.ContinuousBatchProcessor.__dict__[name] for name in methods} == methods
    assert all(f.__module__ == ca.__name__ for f in methods.values())
    assert ours == []


def test_sequential_engine_serves_one_request_at_a_time(tiny_shape):
    from calibrate.engines.hf.engine import EngineRequest, SequentialEngine
    engine = SequentialEngine(tiny_shape)
    records = engine.run([EngineRequest(0.0, 50, 6), EngineRequest(0.0, 20, 3)])
    assert [len(engine.generate([1, 2, 3], 4))] == [4]
    assert records[1].first_token_s > records[0].finish_s


def test_an_engine_that_attends_over_the_packed_batch_replaces_the_attention_tables(tmp_path):
    """replaces_attention: the profile's per-sequence attention (and the part of it kept in
    the per-sequence overhead) gives way to the engine's per-key cost."""
    data = load_profile(resolve_profile_path(SHIPPED))
    plain = _cost(_profile_with_engine(tmp_path, None))
    packed = _cost(_profile_with_engine(tmp_path, {**ENGINE, "replaces_attention": True}))
    tokens, seqs, work, dkv, kv = 40.0, 8.0, 32 * (100 + 16.0), 700.0, 700.0 + 132.0
    layers = data["model"]["num_layers"]
    attention = layers * (plain.attn_prefill_s(work) + plain.attn_decode_s(dkv)) + seqs * (
        layers * data["overhead"]["attn_decode_per_seq_per_layer_s"])
    want = (plain.step_scalar(tokens, seqs, work, dkv, kv)[0] - attention
            + ENGINE["constant_s"] + seqs * ENGINE["per_seq_s"] + ENGINE["per_prefill_step_s"]
            + kv * per_key_s(tokens))
    assert packed.step_scalar(tokens, seqs, work, dkv, kv)[0] == pytest.approx(want, rel=1e-9)


def test_a_live_validation_records_a_log_that_reanalyses_to_its_figures(tmp_path):
    """The whole live path on a handful of requests (quick grid, one replay): the engine
    serves them, the log written beside the results holds every request and step, and the
    fit and comparison redone from that log give the live run's figures exactly. No time
    is bounded: the figures themselves depend on this machine's speed."""
    pytest.importorskip("transformers")
    from calibrate.engines.hf.engine_log import FILE_NAME, EngineLog
    from calibrate.engines.hf import draw_requests, load_workload, validate, validate_logs
    data = yaml.safe_load((ROOT / "scenarios" / "validate" / "smoke.yaml").read_text())
    data["duration"] = "2s"
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    drawn = draw_requests(load_workload(path))
    live = validate([path], tmp_path / "live", quick_fit=True, replays=1, log=lambda _m: None)
    elog = EngineLog.read(tmp_path / "live" / "validate-smoke" / FILE_NAME)
    (records, steps), = elog.replays
    assert [(r.prompt_tokens, r.output_tokens) for r in records] == \
        [(d.prompt_tokens, d.output_tokens) for d in drawn]
    assert all(r.arrival_s <= r.first_token_s <= r.finish_s for r in records)
    assert sum(q for s in steps for q, _, p in s.seqs if p) == sum(d.prompt_tokens
                                                                   for d in drawn)
    assert elog.calibration and elog.meta["quick_fit"] is True
    again = validate_logs([tmp_path / "live"], tmp_path / "again", log=lambda _m: None)
    (a,), (b,) = live.results, again.results
    assert (a.measured, a.predicted, a.step_error) == (b.measured, b.predicted, b.step_error)
    assert live.fits["validate-smoke"].engine == again.fits["validate-smoke"].engine


# -- the calibration grid -----------------------------------------------------------------------
@pytest.mark.parametrize("num_blocks, filled", [
    (48, {(4, 336), (8, 144), (16, 48)}),       # 1,536 tokens: 4 x 640 does not fit
    (96, {(8, 336), (16, 144), (32, 48)}),
    (1024, set())])                             # every standard run fits
def test_the_grid_fits_the_cache_and_fills_a_small_one_at_each_batch_size(num_blocks,
                                                                          filled):
    """Every run's prompts and outputs fit the KV cache at once; where a batch size's
    longer prompts do not, the grid also has that batch size with the longest prompts the
    cache holds (a small cache's engine decodes there, reading the most keys)."""
    from calibrate.engines.step_fit import continuous_grid
    from calibrate.engines.records import ContinuousLimits
    runs = continuous_grid(ContinuousLimits(512, 32, 32, num_blocks))
    for run in runs:
        assert sum(r.prompt_tokens + r.output_tokens + 32 for r in run) <= num_blocks * 32
    batches = {(len(run), run[0].prompt_tokens) for run in runs
               if all(r.arrival_s == 0 and r.prompt_tokens == run[0].prompt_tokens
                      for r in run)}
    assert {(b, c) for b, c in batches if c not in (32, 160, 640, 1024, 2048)} == filled
