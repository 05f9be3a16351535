"""The shipped GPU profiles, rebuilt from the measured-kernel database.

    python -m calibrate gpu-profiles [--out profiles/calibrated/gpu] [--engine vllm]

For every shipped dense model and mixture of experts, GPU the database covers,
tensor-parallel degree 1/2/4/8 and (weights, KV cache) dtype pair bf16/bf16,
bf16/fp8, fp8/bf16 and fp8/fp8, a profile is built (``calibrate.kernels.from_kernels``) where
the model leaves room for a KV cache at fleetsim's default memory settings and
the database has the kernels (for a mixture of experts, its MoE table);
``index.yaml`` beside them lists each profile with its fit errors and each
combination left out with the reason.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from calibrate.kernels import from_kernels
from calibrate.kernels.kernel_db import KernelDbError, package_version
from calibrate.fitting.profile_file import ProfileDumper
from calibrate.fitting.shapes import load_model
from calibrate.output import write_report
from sim.config import profiles
from sim.config.errors import ScenarioError

MODELS = ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen2.5-72b")
# apart from MODELS, which the roofline fit (calibrate.kernels.roofline_fit) reads as dense layers:
# a model whose layers one of MODELS has already (Llama-2-70B: Llama-3.1-70B's layers, a
# smaller vocabulary), and the mixtures of experts
SAME_LAYER_MODELS = ("llama-2-70b",)
MOE_MODELS = ("mixtral-8x7b",)
GPUS = ("H100-SXM", "H200", "B200", "A100-80GB", "L40S")
TPS = (1, 2, 4, 8)
INDEX_MARK = "# The shipped GPU profiles and what was left out"   # an index fleetsim wrote
INDEX_HEADER = ("# The shipped GPU profiles and what was left out (`python -m calibrate "
                "gpu-profiles`).\n")
DTYPES = (("bf16", "bf16"), ("bf16", "fp8"), ("fp8", "bf16"), ("fp8", "fp8"))


def fits(model: str, hardware: str, tp: int, dtype: str, kv_dtype: str) -> bool:
    """Within one node and with room for a KV cache at the default pool settings; a tp
    that does not divide the heads is left to the build, which says so."""
    return (tp <= profiles.find_hardware(hardware).max_gpus_per_node
            and from_kernels.room_for_kv(model, hardware, tp, dtype, kv_dtype))


def build_all(out: Path, engine: str = "vllm", log=print, root=None) -> dict:
    built, skipped = [], []
    for gpu in GPUS:
        hw = profiles.find_hardware(gpu)
        folder = out / gpu.lower() / engine
        for model in MODELS + SAME_LAYER_MODELS + MOE_MODELS:
            shape = load_model(model)
            for tp in TPS:
                for dtype, kv_dtype in DTYPES:
                    what = f"{gpu} {model} tp{tp} {dtype}/{kv_dtype}"
                    if not fits(model, gpu, tp, dtype, kv_dtype):
                        skipped.append({"profile": what, "why": "no room for a KV cache, or "
                                        "tp beyond one node"})
                        continue
                    try:
                        prof = from_kernels.build(shape, gpu, tp, engine, dtype, kv_dtype,
                                                  hw.hbm_bandwidth, root=root)
                    except KernelDbError as exc:
                        skipped.append({"profile": what, "why": str(exc)})
                        log(f"skip {what}: {exc}")
                        continue
                    path = from_kernels.write(prof, folder)
                    built.append({"profile": str(path.relative_to(out)),
                                  "engine_version": prof["source"]["engine_version"],
                                  "fit_error_median": {t: e["median"] for t, e in
                                                       prof["fit_error"].items()},
                                  "held_back_error_median": {
                                      t: e["median"] for t, e in
                                      prof["held_back_error"].items()}})
                    log(f"wrote {path}")
    index = {"kind": "fleetsim-gpu-profile-index", "package_version": package_version(),
             "engine": engine,
             "note": ("Profiles built by `python -m calibrate gpu-profiles` from GPU kernels "
                      "measured on real GPUs (NVIDIA AIConfigurator's database, "
                      "aiconfigurator-core, Apache-2.0); medians of each table's relative "
                      "error on the database points it was built from, and held back."),
             "profiles": built, "skipped": skipped}
    text = yaml.dump(index, Dumper=ProfileDumper, sort_keys=False, width=96)
    write_report(out / f"index-{engine}.yaml", INDEX_HEADER + text, INDEX_MARK,
                 "an index of GPU profiles fleetsim wrote")
    return index


def command(args) -> int:
    """``python -m calibrate gpu-profiles``: every shipped GPU profile of one engine."""
    try:
        index = build_all(Path(args.out), args.engine)
    except KernelDbError as exc:
        raise ScenarioError(str(exc)) from None
    print(f"{len(index['profiles'])} profiles written, {len(index['skipped'])} combinations "
          f"left out (see {args.out}/index-{args.engine}.yaml)")
    return 0
