"""Calibrated profiles of mixture-of-experts models from the measured-kernel database.

The fixture is ``test_kernel_profiles``'s database (GEMMs, attention, all-reduces whose
latencies follow known formulas) with an MoE table laid out as AIConfigurator's
(``<gpu>/moe/<engine>/<version>/moe_perf.parquet``, latencies in ms) for a small model of
4 experts, top 2, at tensor-parallel degrees 1 and 2.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calibrate.kernels import from_kernels
from calibrate.kernels.kernel_db import KernelDb, KernelDbError
from calibrate.fitting.shapes import ModelShape, ShardShape
from sim.config import profiles
from sim.config.specs import ModelSpec
from sim.cost.calibrated import CalibratedConfig, CalibratedCostModel
from sim.cost.profile_file import load_profile
from test_kernel_profiles import _write, gemm_ms, write_db

# hidden 512, 8 heads / 4 KV of 64 (tiny-llama's attention), 4 experts of 1536, top 2
TINY_MOE = ModelShape("tiny-moe", 2, 512, 8, 4, 64, 1536, 32000, 4, 2)
MOE_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]


def moe_ms(tokens, tp, dtype="bfloat16"):
    """Weights of the experts touched at few tokens, FLOPs at many; split over tp."""
    scale = 0.6 if dtype.startswith("fp8") else 1.0
    return scale * (0.02 + 4e-5 * tokens) / tp


def _moe_rows(tp, dtype="bfloat16", dist="balanced", hidden=512, inter=1536, experts=4,
              topk=2, ep=1, kernel="vllm_unquantizedfusedmoe_triton_tritonexperts", slower=1.0):
    return [dict(op_name="moe", kernel_source=kernel, moe_dtype=dtype, num_tokens=n,
                 hidden_size=hidden, inter_size=inter, topk=topk, num_experts=experts,
                 moe_tp_size=tp, moe_ep_size=ep, distribution=dist,
                 latency=slower * moe_ms(n, tp, dtype)) for n in MOE_TOKENS]


@pytest.fixture
def db(tmp_path):
    return write_db(tmp_path / "data")


@pytest.fixture
def moe_db(db):
    rows = []
    for tp in (1, 2):
        rows += _moe_rows(tp)
        rows += _moe_rows(tp, dtype="fp8_block", kernel="vllm_fp8moe_triton_tritonexperts")
        # skewed routing, expert parallelism and a kernel timed on fewer shapes: not chosen
        rows += _moe_rows(tp, dist="power_law_1.01", slower=1.5)
        rows += _moe_rows(tp, ep=2, slower=3.0)
        rows.append(dict(_moe_rows(tp)[4], kernel_source="other_kernel", latency=99.0))
    # another model's shape, which the errors name
    rows += _moe_rows(1, hidden=1024, inter=768, experts=8, topk=1)
    _write(db, "h100_sxm", "moe", "vllm", "0.24.0", "moe_perf.parquet", pd.DataFrame(rows))
    return db


def build(root, tp=2, dtype="bf16", shape=TINY_MOE):
    hw = profiles.find_hardware("H100-SXM")
    return from_kernels.build(shape, "H100-SXM", tp, "vllm", dtype, "bf16", hw.hbm_bandwidth,
                              root=root)


def _cost(root, prof) -> CalibratedCostModel:
    path = from_kernels.write(prof, root.parent / "out")
    assert path.name == f"tiny-moe-tp{prof['tp']}-{prof['dtype']}.yaml"
    spec = ModelSpec.model_validate(TINY_MOE.as_dict())
    return CalibratedCostModel(spec, profiles.find_hardware("H100-SXM"), prof["tp"],
                               prof["dtype"], prof["kv_dtype"],
                               CalibratedConfig(profile=str(path)))


# -- the MoE term ------------------------------------------------------------------------------
def test_moe_profile_reproduces_the_moe_rows_it_was_built_from(moe_db):
    """At tp 2 the dense table, at every token count the MoE table times, is the balanced
    tp-2 row plus the attention GEMMs, the router GEMM (4 x 512, below the narrowest
    GEMM timed: read as the 256-wide one) and the element-wise kernels less SiLU-and-mul,
    read back through the simulator's table (to the 4 significant digits kept)."""
    prof = build(moe_db)
    shard = ShardShape(TINY_MOE, 2)
    assert from_kernels.moe_layer_gemms(shard) == {"qkv": (512, 512), "o_proj": (512, 256),
                                                    "router": (4, 512)}
    hw = profiles.find_hardware("H100-SXM")
    cost = _cost(moe_db, prof)
    for m in MOE_TOKENS:
        want = (1e-3 * (moe_ms(m, 2) + gemm_ms(m, 512, 512) + gemm_ms(m, 512, 256)
                        + gemm_ms(m, 256, 512))
                + from_kernels.elementwise_s(m, shard, hw.hbm_bandwidth, mlp_activation=False))
        assert cost.dense_s(np.array([float(m)]))[0] == pytest.approx(want, rel=1e-3)
    assert [x for x, _ in prof["tables"]["dense"]] == MOE_TOKENS
    assert prof["points"]["dense"] == len(MOE_TOKENS)
    assert prof["fit_error"]["dense"]["max"] < 1e-3
    assert prof["held_back_error"]["dense"]["points"] > 0
    assert prof["source"]["kernels"]["moe"] == (
        "0.24.0 bfloat16 vllm_unquantizedfusedmoe_triton_tritonexperts, moe_tp 2 moe_ep 1, "
        "balanced routing")
    assert prof["model"]["num_experts"] == 4 and prof["model"]["experts_per_token"] == 2
    assert "router GEMM" in prof["note"]


def test_moe_rows_split_by_tp_and_fp8_falls_back_to_block_scaled_rows(moe_db):
    """Each tp reads its own rows (the table's inter_size is the full expert); fp8 weights
    read block-scaled rows where the table has no per-tensor ones, and say so."""
    kdb = KernelDb.open("H100-SXM", "vllm", root=moe_db)
    one = kdb.moe(512, 1536, 2, 4, 1, "bf16")
    two = kdb.moe(512, 1536, 2, 4, 2, "bf16")
    assert list(one.tokens) == MOE_TOKENS
    assert one.seconds == pytest.approx([1e-3 * moe_ms(n, 1) for n in MOE_TOKENS], rel=1e-12)
    assert two.seconds == pytest.approx(one.seconds / 2, rel=1e-12)
    fp8 = kdb.moe(512, 1536, 2, 4, 2, "fp8")
    assert (fp8.moe_dtype, fp8.kernel) == ("fp8_block", "vllm_fp8moe_triton_tritonexperts")
    assert fp8.seconds == pytest.approx([1e-3 * moe_ms(n, 2, "fp8") for n in MOE_TOKENS])
    assert build(moe_db, dtype="fp8")["source"]["kernels"]["moe"].startswith(
        "0.24.0 fp8_block vllm_fp8moe_triton_tritonexperts, moe_tp 2")


def test_without_balanced_rows_the_least_skewed_power_law_is_read(db):
    rows = (_moe_rows(1, dist="power_law_1.2", slower=2.0)
            + _moe_rows(1, dist="power_law_1.01", slower=1.5))
    _write(db, "h100_sxm", "moe", "vllm", "0.24.0", "moe_perf.parquet", pd.DataFrame(rows))
    curve = KernelDb.open("H100-SXM", "vllm", root=db).moe(512, 1536, 2, 4, 1, "bf16")
    assert curve.distribution == "power_law_1.01"
    assert curve.seconds == pytest.approx([1.5e-3 * moe_ms(n, 1) for n in MOE_TOKENS])


def test_an_older_moe_table_is_read_when_the_engines_own_lacks_the_shape(moe_db):
    rows = _moe_rows(2, slower=2.0)
    _write(moe_db, "h100_sxm", "moe", "vllm", "0.19.0", "moe_perf.parquet", pd.DataFrame(rows))
    _write(moe_db, "h100_sxm", "moe", "vllm", "0.24.0", "moe_perf.parquet",
           pd.DataFrame(_moe_rows(1, hidden=1024, inter=768, experts=8, topk=1)))
    kdb = KernelDb.open("H100-SXM", "vllm", root=moe_db)
    assert kdb.moe_versions() == ["0.24.0", "0.19.0"]
    curve = kdb.moe(512, 1536, 2, 4, 2, "bf16")
    assert curve.version == "0.19.0"
    assert curve.seconds == pytest.approx([2e-3 * moe_ms(n, 2) for n in MOE_TOKENS])


# -- what the database lacks: named, with what it has ----------------------------------------
def test_a_gpu_engine_without_moe_tables_is_named_with_the_engines_that_have_them(db):
    _write(db, "h100_sxm", "moe", "sglang", "0.5.14", "moe_perf.parquet",
           pd.DataFrame(_moe_rows(2, kernel="sglang_fused_moe_triton")))
    with pytest.raises(KernelDbError, match=r"^tiny-moe is a mixture of experts: h100_sxm: the "
                       r"kernel database has no vllm MoE table \(moe_perf.parquet\); engines "
                       r"with MoE tables there: sglang$"):
        build(db)


@pytest.mark.parametrize("shape, tp, dtype, match", [
    (ModelShape("other", 2, 512, 8, 4, 64, 2048, 32000, 4, 2), 2, "bf16",
     r"h100_sxm vllm MoE tables \(0.24.0\) do not time 4 experts top 2, hidden 512, "
     r"intermediate 2048; they time \(experts x top-k hidden/intermediate\) 4x2 512/1536, "
     r"8x1 1024/768"),
    (ModelShape("wide", 2, 512, 8, 4, 64, 1536, 32000, 4, 2), 4, "bf16",
     r"no 4 experts top 2, hidden 512, intermediate 1536 at tp 4 without expert parallelism "
     r"in bfloat16; they time it in bfloat16 at tp 1, 2; in fp8_block at tp 1, 2"),
    (TINY_MOE, 2, "int4", r"weight dtype 'int4': profiles of mixtures of experts read the MoE "
                          r"tables in bf16, fp16, fp8"),
])
def test_an_moe_shape_tp_or_dtype_the_tables_lack_is_named_with_what_they_time(
        moe_db, shape, tp, dtype, match):
    kdb = KernelDb.open("H100-SXM", "vllm", root=moe_db)
    with pytest.raises(KernelDbError, match=match):
        kdb.moe(shape.hidden_size, shape.ffn_size, shape.experts_per_token, shape.num_experts,
                tp, dtype)


def test_cli_refuses_a_missing_moe_combination_with_exit_2(moe_db, tmp_path, capsys):
    from sim.cli import main
    assert main(["calibrate", "--from", "aiconfigurator", "--gpu", "H100-SXM", "--model",
                 "mixtral-8x7b", "--tp", "2", "--kernel-db", str(moe_db),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert ("mixtral-8x7b is a mixture of experts: h100_sxm vllm MoE tables (0.24.0) do not "
            "time 8 experts top 2, hidden 4096, intermediate 14336") in err
    assert not list(tmp_path.glob("out/*.yaml"))


# -- the shipped mixtral profiles -------------------------------------------------------------
def test_a_shipped_moe_profile_names_the_moe_kernel_it_read():
    """(That it is what the installed database gives is checked beside the dense
    profiles: test_kernel_profiles.)"""
    from sim.config.paths import data_dir
    path = (data_dir("profiles") / "calibrated" / "gpu" / "h100-sxm" / "vllm"
            / "mixtral-8x7b-tp2-bf16.yaml")
    shipped = load_profile(path)
    assert shipped["source"]["kernels"]["moe"] == (
        "0.24.0 bfloat16 vllm_unquantizedfusedmoe_triton_tritonexperts, moe_tp 2 moe_ep 1, "
        "balanced routing")
