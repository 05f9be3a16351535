"""Calibrated profiles built from a database of GPU kernels measured on real GPUs.

The database is read from a small fixture laid out as AIConfigurator's
(``<gpu>/<family>/<engine>/<version>/*.parquet``, latencies in ms) whose latencies follow
known formulas, so that what the builder reads and interpolates can be checked exactly.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from calibrate.kernels import from_kernels
from calibrate.kernels.curves import GemmCurves
from calibrate.kernels.kernel_db import KernelDb, KernelDbError
from calibrate.fitting.shapes import ModelShape, ShardShape, load_model
from sim.config import profiles
from sim.cost.calibrated import CalibratedConfig, CalibratedCostModel
from sim.cost.profile_file import load_profile

TINY = load_model("tiny-llama")           # hidden 512, 8 heads / 4 KV of 64, MLP 1536
MS_GRID = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
NK_GRID = [256, 512, 768, 1024, 1536, 2048, 4096, 16384]


def gemm_ms(m, n, k, dtype="bfloat16"):
    """Bound by weights at small m, by FLOPs at large m; a product in n and k, so that a
    log-bilinear read between grid shapes is exact."""
    scale = 0.5 if dtype == "fp8" else 1.0
    return scale * 1e-9 * n * k * (1.0 + m / 256.0)


def ctx_ms(b, isl):
    return 2e-7 * b * isl ** 2 + 0.004


def gen_ms(b, keys):
    return 3e-7 * b * keys + 0.003


def ar_ms(elements):
    return 0.005 + 1e-8 * elements


def _write(root, gpu, family, engine, version, name, frame):
    folder = root / gpu / family / engine / version
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(folder / name)


@pytest.fixture
def db(tmp_path):
    return write_db(tmp_path / "data")


def write_db(root: Path) -> Path:
    """A small kernel database under ``root``, laid out as AIConfigurator's."""
    gemm = [dict(gemm_dtype=d, m=m, n=n, k=k, latency=gemm_ms(m, n, k, d),
                 kernel_source="torch.nn.functional.linear")
            for d in ("bfloat16", "fp8") for n in NK_GRID for k in NK_GRID for m in MS_GRID]
    _write(root, "h100_sxm", "gemm", "vllm", "0.24.0", "gemm_perf.parquet", pd.DataFrame(gemm))
    # an older version with GEMMs only: not chosen
    _write(root, "h100_sxm", "gemm", "vllm", "0.9.0", "gemm_perf.parquet",
           pd.DataFrame(gemm[:10]))
    ctx, gen = [], []
    for heads, kv in ((4, 2), (8, 4)):
        for kvd in ("bfloat16", "fp8"):
            for b in (1, 2, 4):
                for isl in (1, 16, 64, 256, 1024):
                    ctx.append(dict(batch_size=b, isl=isl, num_heads=heads,
                                    num_key_value_heads=kv, head_dim=64, kv_cache_dtype=kvd,
                                    window_size=0, step=0, latency=ctx_ms(b, isl),
                                    kernel_source="vllm_flash_attn_fa3"))
                # a second kernel timed on fewer shapes, and slower: not chosen
                ctx.append(dict(batch_size=b, isl=64, num_heads=heads, num_key_value_heads=kv,
                                head_dim=64, kv_cache_dtype=kvd, window_size=0, step=0,
                                latency=99.0, kernel_source="vllm_flashinfer"))
                for step in (15, 127, 1023):
                    gen.append(dict(batch_size=b, isl=1, num_heads=heads,
                                    num_key_value_heads=kv, head_dim=64, kv_cache_dtype=kvd,
                                    window_size=0, step=step, latency=gen_ms(b, 1 + step),
                                    kernel_source="vllm_flash_attn_fa3"))
    # a sliding-window row that must be ignored
    ctx.append(dict(ctx[0], window_size=128, latency=50.0))
    _write(root, "h100_sxm", "attention", "vllm", "0.24.0", "context_attention_perf.parquet",
           pd.DataFrame(ctx))
    _write(root, "h100_sxm", "attention", "vllm", "0.24.0",
           "generation_attention_perf.parquet", pd.DataFrame(gen))
    ar = []
    for g in (2, 4):
        for m in MS_GRID:
            size = m * TINY.hidden_size
            ar.append(dict(allreduce_dtype="bfloat16", num_gpus=g, message_size=size,
                           latency=ar_ms(size), kernel_source="vLLM_custom_graph"))
            ar.append(dict(allreduce_dtype="bfloat16", num_gpus=g, message_size=size,
                           latency=10 * ar_ms(size), kernel_source="vLLM_custom_eager"))
    _write(root, "h100_sxm", "comm", "vllm", "0.24.0", "custom_allreduce_perf.parquet",
           pd.DataFrame(ar))
    (root / "h200_sxm" / "gemm" / "sglang" / "0.5.14").mkdir(parents=True)
    return root


def build(db, tp=2, dtype="bf16", kv_dtype="bf16", shape=TINY):
    hw = profiles.find_hardware("H100-SXM")
    return from_kernels.build(shape, "H100-SXM", tp, "vllm", dtype, kv_dtype,
                              hw.hbm_bandwidth, root=db)


# -- reading the database -------------------------------------------------------------------------
def test_gemm_curves_read_the_grid_exactly_and_interpolate_between_shapes(db):
    kdb = KernelDb.open("H100-SXM", "vllm", root=db)
    assert (kdb.version, kdb.comm_version) == ("0.24.0", "0.24.0")
    g = kdb.gemm_curves("bf16")
    for m, n, k in ((1, 512, 512), (256, 1536, 512), (4096, 16384, 4096)):
        assert g.seconds(m, n, k) == pytest.approx(1e-3 * gemm_ms(m, n, k), rel=1e-12)
    # between measured m, n and k: log-linear in each, exact for this product
    assert g.seconds(256, 640, 700) == pytest.approx(1e-3 * gemm_ms(256, 640, 700), rel=1e-9)
    # past the largest n: split into parts the grid has
    assert g.seconds(64, 32768, 512) == pytest.approx(1e-3 * gemm_ms(64, 32768, 512),
                                                      rel=1e-9)
    # past the largest m: in proportion to m
    assert g.seconds(8192, 512, 512) == pytest.approx(
        1e-3 * gemm_ms(4096, 512, 512) * 2, rel=1e-12)
    assert kdb.gemm_curves("fp8").seconds(16, 512, 512) == pytest.approx(
        1e-3 * gemm_ms(16, 512, 512, "fp8"), rel=1e-12)


def test_attention_picks_one_kernel_and_the_full_window(db):
    kdb = KernelDb.open("H100-SXM", "vllm", root=db)
    b, s, t, kernel = kdb.attention("context", 4, 2, 64, "bf16")
    assert kernel == "vllm_flash_attn_fa3" and len(t) == 15
    assert t == pytest.approx([1e-3 * ctx_ms(x, y) for x, y in zip(b, s)], rel=1e-12)
    b, s, t, _ = kdb.attention("generation", 4, 2, 64, "fp8")
    assert sorted(set(s)) == [16, 128, 1024]          # keys = isl + step
    assert t == pytest.approx([1e-3 * gen_ms(x, y) for x, y in zip(b, s)], rel=1e-12)


def test_allreduce_reads_cuda_graph_launches(db):
    elems, secs, kernel = KernelDb.open("H100-SXM", "vllm", root=db).allreduce(2)
    assert kernel == "vLLM_custom_graph"
    assert secs == pytest.approx([1e-3 * ar_ms(e) for e in elems], rel=1e-12)


# -- the profile --------------------------------------------------------------------------------------
def test_profile_reproduces_the_database_rows_it_was_built_from(db):
    """tiny-llama at tp 2: each shard GEMM is on the fixture's grid, so the dense table at
    every measured m is the four GEMMs' rows plus the element-wise model; the other terms
    are the attention, LM-head and all-reduce rows, read back through the simulator's own
    table interpolation (to the 4 significant digits a profile keeps)."""
    prof = build(db)
    shard = ShardShape(TINY, 2)
    gemms = from_kernels.layer_gemms(shard)
    assert gemms == {"qkv": (512, 512), "o_proj": (512, 256), "gate_up": (1536, 512),
                     "down": (512, 768)}
    hw = profiles.find_hardware("H100-SXM")
    cost = CalibratedCostModel(profiles.find_model("tiny-llama"), hw, 2, "bf16", "bf16",
                               CalibratedConfig(profile=_save(db, prof)))
    for m in MS_GRID:
        want = (1e-3 * sum(gemm_ms(m, n, k) for n, k in gemms.values())
                + from_kernels.elementwise_s(m, shard, hw.hbm_bandwidth))
        assert cost.dense_s(np.array([float(m)]))[0] == pytest.approx(want, rel=1e-3)
        assert cost.lm_head_s(np.array([float(m)]))[0] == pytest.approx(
            1e-3 * gemm_ms(m, 16000, 512), rel=1e-3)
        assert cost.tp_comm_s(np.array([float(m)]))[0] == pytest.approx(
            2e-3 * ar_ms(m * 512), rel=1e-3)
    for b, isl in ((1, 64), (2, 256), (4, 1024)):
        assert cost.attn_prefill_s(np.array([b * isl ** 2 / 2.0]))[0] == pytest.approx(
            1e-3 * ctx_ms(b, isl), rel=0.02)
    for b, keys in ((1, 16), (2, 128), (4, 1024)):
        assert cost.attn_decode_s(np.array([float(b * keys)]))[0] == pytest.approx(
            1e-3 * gen_ms(b, keys), rel=0.02)
    assert prof["tp_comm_measured"] is True
    assert prof["fit_error"]["dense"]["max"] < 1e-3
    assert prof["held_back_error"]["dense"]["points"] > 0
    src = prof["source"]
    assert (src["gpu"], src["engine"], src["engine_version"]) == ("h100_sxm", "vllm", "0.24.0")
    assert src["kernels"]["attention_prefill"] == "vllm_flash_attn_fa3"
    assert prof["dtype"] == "bf16" and prof["kv_dtype"] == "bf16" and prof["tp"] == 2


def test_fp8_weights_keep_the_lm_head_in_bf16(db):
    prof = build(db, dtype="fp8", kv_dtype="fp8")
    dense = dict((x, t) for x, t in prof["tables"]["dense"])
    head = dict((x, t) for x, t in prof["tables"]["lm_head"])
    bf16 = build(db)
    assert dense[256] < dict((x, t) for x, t in bf16["tables"]["dense"])[256]
    assert head[256] == pytest.approx(1e-3 * gemm_ms(256, 16000, 512), rel=1e-3)
    assert prof["source"]["kernels"]["gemm"] == "0.24.0 fp8"


def test_at_tp_1_there_is_no_all_reduce(db):
    prof = build(db, tp=1)
    assert all(t == 0 for _, t in prof["tables"]["tp_comm"])
    assert prof["tp_comm_measured"] is False


def _save(db, prof) -> str:
    path = from_kernels.write(prof, db.parent / "out")
    assert path.name == f"tiny-llama-tp{prof['tp']}-{prof['dtype']}" + (
        "" if prof["kv_dtype"] == "bf16" else f"-kv{prof['kv_dtype']}") + ".yaml"
    assert load_profile(path)["model"]["num_layers"] == 8
    return str(path)


# -- what the database lacks: named, with what it has ----------------------------------------------------
@pytest.mark.parametrize("call, match", [
    (lambda db: KernelDb.open("MI300X", "vllm", root=db),
     "GPU 'MI300X': the kernel database covers A100-80GB, B200, H100-SXM, H200, L40S"),
    (lambda db: KernelDb.open("B200", "vllm", root=db),
     r"GPU 'B200' \(b200_sxm\) is not in this kernel database; it has H100-SXM, H200"),
    (lambda db: KernelDb.open("H200", "vllm", root=db),
     "no vllm GEMM and attention tables for H200; engines with tables there: sglang"),
    (lambda db: KernelDb.open("H100-SXM", "vllm", "0.9.0", root=db),
     "vllm 0.9.0 on H100-SXM: the kernel database has versions 0.24.0"),
    (lambda db: KernelDb.open("H100-SXM", "tgi", root=db), "expected one of vllm, sglang"),
    (lambda db: KernelDb.open("H100-SXM", "vllm", root=db).gemm_curves("int4"),
     "times GEMMs in bf16, fp16, fp8"),
    (lambda db: KernelDb.open("H100-SXM", "vllm", root=db).attention("context", 16, 2, 64,
                                                                     "bf16"),
     "no context attention for 16 heads / 2 KV heads of 64 .* timed at head_dim 64: 4/2, 8/4"),
    (lambda db: KernelDb.open("H100-SXM", "vllm", root=db).allreduce(8),
     "no all-reduce over 8 GPUs; it has 2, 4"),
    (lambda db: from_kernels.build(ModelShape("moe", 2, 512, 8, 4, 64, 1536, 32000, 4, 2),
                                   "H100-SXM", 1, "vllm", "bf16", "bf16", 3e12, root=db),
     "moe is a mixture of experts: h100_sxm: the kernel database has no vllm MoE table"),
])
def test_what_the_database_lacks_is_named_with_what_it_has(db, call, match):
    with pytest.raises(KernelDbError, match=match):
        call(db)


def test_a_database_that_is_not_installed_says_how_to_install_it(monkeypatch):
    import importlib.util
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(KernelDbError, match=r"not installed; pip install 'fleetsim\[kernels\]'"):
        KernelDb.open("H100-SXM", "vllm")


# -- the command line ---------------------------------------------------------------------------------------
def test_cli_writes_the_profile_and_prints_its_fit(db, tmp_path, capsys):
    from sim.cli import main
    out = tmp_path / "profiles"
    assert main(["calibrate", "--from", "aiconfigurator", "--gpu", "h100-sxm", "--model",
                 "tiny-llama", "--tp", "2", "--dtype", "fp8", "--kv-dtype", "fp8",
                 "--kernel-db", str(db), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tiny-llama tp=2 fp8 (KV fp8) on H100-SXM from vllm 0.24.0 kernels" in text
    assert "dense" in text and "attn_decode" in text
    data = yaml.safe_load((out / "tiny-llama-tp2-fp8-kvfp8.yaml").read_text())
    assert data["kind"] == "fleetsim-calibrated-step-time"


@pytest.mark.parametrize("argv, match", [
    (["--model", "tiny-llama"], "name the GPU with --gpu"),
    (["--model", "tiny-llama", "--gpu", "X100"], "--gpu X100: unknown GPU; known: A100-80GB"),
    (["--model", "nope", "--gpu", "H100-SXM"], "unknown model"),
    (["--model", "llama-3.1-405b", "--gpu", "H100-SXM"],
     "llama-3.1-405b in bf16 (756.0 GiB of weights) leaves no room for a KV cache on 1 x "
     "H100-SXM"),
    (["--model", "tiny-llama", "--gpu", "B200"], "not in this kernel database"),
])
def test_cli_errors_exit_2_with_a_located_message(db, capsys, argv, match):
    from sim.cli import main
    assert main(["calibrate", "--from", "aiconfigurator", "--kernel-db", str(db), *argv]) == 2
    assert match in capsys.readouterr().err


def test_cli_flags_of_the_database_path_are_refused_without_it(capsys):
    from sim.cli import main
    assert main(["calibrate", "--model", "tiny-llama", "--gpu", "H100-SXM"]) == 2
    assert "--gpu is for profiles built from measured kernels" in capsys.readouterr().err
    assert main(["calibrate", "--model", "tiny-llama", "--dtype", "fp8"]) == 2
    assert "fp8 profiles come from measured kernels" in capsys.readouterr().err


def test_gemm_curves_need_the_shapes_around_an_off_grid_one():
    g = GemmCurves({(256, 256): [[1.0, 1e-5], [8.0, 2e-5]],
                    (512, 512): [[1.0, 4e-5], [8.0, 8e-5]]})
    with pytest.raises(KernelDbError, match=r"lacks the measured shape \(256 x 512\)"):
        g.seconds(4, 300, 300)
    assert math.isclose(g.seconds(8, 512, 512), 8e-5)


def test_a_gemm_timed_slower_than_a_larger_m_is_read_as_that_m_and_counted():
    """vLLM's FP8 rows time m = 257 slower than m = 512 (its kernel pads m to a multiple
    of 256): such a point reads as the larger m's time, so every m in (256, 512] costs
    what 512 does; a few per cent of scatter is noise and is kept."""
    rows = pd.DataFrame({
        "m": [1, 2, 256, 257, 384, 512, 1024],
        "n": [512] * 7, "k": [512] * 7,
        # m=2 is 5% slower than m=256 (noise, kept); m=257 and m=384 are 70% and 20%
        # slower than m=512 (read as m=512)
        "latency": [0.010, 0.0105, 0.010, 0.034, 0.024, 0.020, 0.040],
    })
    g = GemmCurves.from_rows(rows)
    assert g.capped == 2
    np.testing.assert_allclose(g.curves[(512, 512)], [
        [1, 1e-5], [2, 1.05e-5], [256, 1e-5], [257, 2e-5], [384, 2e-5], [512, 2e-5],
        [1024, 4e-5]], rtol=1e-12)
    for m in (257, 300, 512):
        assert g.seconds(m, 512, 512) == pytest.approx(2e-5)
    assert g.seconds(256, 512, 512) == pytest.approx(1e-5)


# -- the shipped GPU profiles --------------------------------------------------------------------------
def _shipped_index() -> dict:
    from sim.config.paths import data_dir
    return yaml.safe_load((data_dir("profiles") / "calibrated" / "gpu" / "index-vllm.yaml")
                          .read_text())


def test_every_shipped_gpu_profile_loads_for_its_model_and_tp():
    """Each profile in the index reads as the simulator's cost model for its model, GPU,
    TP and dtypes, and fits the database points it was built from to a few percent."""
    from sim.config.paths import data_dir
    index = _shipped_index()
    assert len(index["profiles"]) >= 100
    gpus = set()
    for row in index["profiles"]:
        path = data_dir("profiles") / "calibrated" / "gpu" / row["profile"]
        data = load_profile(path)
        gpu = profiles.find_hardware(data["device_name"])
        gpus.add(gpu.name)
        cost = CalibratedCostModel(profiles.find_model(data["model"]["name"]), gpu, data["tp"],
                                   data["dtype"], data["kv_dtype"],
                                   CalibratedConfig(profile=str(path)))
        t = cost.step_scalar(64.0, 64.0, 0.0, 64 * 1024.0)[0]
        assert 1e-4 < t < 1.0, (row["profile"], t)
        assert all(e < 0.2 for e in row["fit_error_median"].values()), row
    assert gpus == {"H100-SXM", "H200", "B200", "A100-80GB", "L40S"}
    # what could not be built says why
    assert all(s["why"] for s in index["skipped"])


@pytest.mark.parametrize("model, dtype", [("llama-3.1-8b", "fp8"), ("mixtral-8x7b", "bf16")])
def test_a_shipped_gpu_profile_is_what_the_installed_database_gives(model, dtype):
    pytest.importorskip("aiconfigurator_core")
    from sim.config.paths import data_dir
    path = (data_dir("profiles") / "calibrated" / "gpu" / "h100-sxm" / "vllm"
            / f"{model}-tp2-{dtype}.yaml")
    shipped = load_profile(path)
    hw = profiles.find_hardware("H100-SXM")
    again = from_kernels.build(load_model(model), "H100-SXM", 2, "vllm", dtype,
                               "bf16", hw.hbm_bandwidth)
    assert again["tables"] == shipped["tables"]
    assert again["overhead"] == shipped["overhead"]
    assert again["source"] == shipped["source"]


def test_a_scenario_runs_on_a_shipped_gpu_profile():
    from simfactories import make_pool, make_scenario
    import sim
    pool = make_pool(model="llama-3.1-8b", hardware="H100-SXM", tp=1,
                     cost_model={"type": "calibrated",
                                 "profile": "calibrated/gpu/h100-sxm/vllm/"
                                            "llama-3.1-8b-tp1-bf16.yaml"})
    res = sim.run(make_scenario(pool=pool, duration=20))
    assert (res.requests["status"] == "completed").all()
    summary = res.summary["pools"]["p"]
    assert summary["cost_model"] == ("calibrated profiles/calibrated/gpu/h100-sxm/vllm/"
                                     "llama-3.1-8b-tp1-bf16.yaml")
    # a KV dtype the profile was not built for is refused, naming both
    bad = make_pool(model="llama-3.1-8b", hardware="H100-SXM", kv_dtype="fp8",
                    cost_model={"type": "calibrated",
                                "profile": "calibrated/gpu/h100-sxm/vllm/"
                                           "llama-3.1-8b-tp1-bf16.yaml"})
    from sim.config.resolve import resolve
    _, problems = resolve(make_scenario(pool=bad))
    assert any("built for kv_dtype bf16, but the pool's kv_dtype is fp8" in m
               for _, m in problems)


# -- the default: the measured profile when one matches, else the roofline ---------------------
def _label(pool: dict, **scenario) -> str:
    import sim
    from simfactories import make_scenario
    res = sim.run(make_scenario(pool=pool, duration=5, **scenario))
    return res.summary["pools"]["p"]["cost_model"]


@pytest.mark.parametrize("pool, label", [
    (dict(model="llama-3.1-8b", hardware="H100-SXM", tp=1),
     "calibrated profiles/calibrated/gpu/h100-sxm/vllm/llama-3.1-8b-tp1-bf16.yaml"),
    (dict(model="llama-3.1-70b", hardware="H200", tp=2, weight_dtype="fp8", kv_dtype="fp8"),
     "calibrated profiles/calibrated/gpu/h200/vllm/llama-3.1-70b-tp2-fp8-kvfp8.yaml"),
    (dict(model="llama-3.1-8b", hardware="MI300X", tp=1), "roofline"),      # no kernels
    (dict(model="mixtral-8x7b", hardware="H100-SXM", tp=2),
     "calibrated profiles/calibrated/gpu/h100-sxm/vllm/mixtral-8x7b-tp2-bf16.yaml"),
    (dict(model="mixtral-8x7b", hardware="A100-80GB", tp=4, weight_dtype="fp8"),
     "roofline"),                                          # no fp8 kernels on A100
    (dict(model="llama-3.1-8b", hardware="H100-SXM", tp=1, weight_dtype="int4"), "roofline"),
])
def test_a_pool_left_to_the_default_runs_on_the_matching_measured_profile(pool, label):
    from simfactories import make_pool
    assert _label(make_pool(**pool, cost_model={"type": "auto"})) == label


def test_the_default_cost_model_is_auto_and_roofline_can_be_asked_for():
    from simfactories import make_pool
    pool = make_pool()
    pool.pop("cost_model")                       # as a scenario that does not name one
    assert _label(pool).startswith("calibrated profiles/calibrated/gpu/h100-sxm/vllm/")
    assert _label(make_pool(cost_model={"type": "roofline"})) == "roofline"


def test_a_model_of_the_scenarios_own_under_a_shipped_name_is_not_matched():
    """A scenario's own llama-3.1-8b with another shape gets the roofline, not the
    shipped profile of a different model."""
    from simfactories import make_pool
    own = dict(profiles.find_model("llama-3.1-8b").model_dump(), num_layers=16)
    assert _label(make_pool(cost_model={"type": "auto"}),
                  models={"llama-3.1-8b": own}) == "roofline"


def test_profiles_command_lists_the_measured_gpu_profiles(capsys):
    from sim.cli import main
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    from sim.config.paths import data_dir
    shipped = sum(len(yaml.safe_load(index.read_text())["profiles"]) for index in
                  (data_dir("profiles") / "calibrated" / "gpu").glob("index-*.yaml"))
    assert shipped > 700
    assert f"measured: {shipped} GPU profiles from measured kernels (sglang, trtllm, vllm on " \
           "a100-80gb, b200, h100-sxm, h200, l40s)" in out


@pytest.mark.parametrize("label, shown", [
    ("calibrated profiles/calibrated/gpu/h100-sxm/vllm/llama-3.1-8b-tp1-bf16.yaml",
     "measured vllm kernels"),
    ("calibrated profiles/calibrated/cpu/tiny-llama.yaml", "calibrated tiny-llama.yaml"),
    ("roofline", "roofline"),
])
def test_the_printed_summary_says_where_step_times_came_from(label, shown):
    import io
    from rich.console import Console
    from sim.output.table import print_summary
    buf = io.StringIO()
    print_summary({"pools": {"p": {"model": "m", "cost_model": label}}},
                  Console(file=buf, width=200))
    row = next(line for line in buf.getvalue().splitlines() if "step times" in line)
    assert row.split("step times", 1)[1].strip() == shown
