"""``fleetsim calibrate``: a step-time profile timed on this machine with torch, or
built from a database of kernels measured on real GPUs."""
from __future__ import annotations

import argparse
from pathlib import Path

from calibrate.arguments import add_torch_arguments
from sim.config.inputs import shown
from sim.config import profiles
from sim.config.errors import ScenarioError


def _cmd_calibrate_from_kernels(args: argparse.Namespace) -> int:
    """A profile built from a database of GPU kernels measured on real GPUs."""
    from calibrate.kernels import from_kernels
    from calibrate.kernels.kernel_db import GPU_FOLDERS, KernelDbError
    from calibrate.fitting.shapes import load_model
    from sim.cost.measured import profile_name
    from sim.output.output_paths import os_error
    if args.gpu is None:
        raise ScenarioError(f"calibrate --from {args.source}: name the GPU with --gpu "
                            f"({', '.join(sorted(GPU_FOLDERS))})")
    hw = profiles.find_hardware(args.gpu)
    if hw is None:
        raise ScenarioError(f"--gpu {args.gpu}: unknown GPU; known: "
                            f"{', '.join(sorted(GPU_FOLDERS))}")
    dtype, kv_dtype = args.dtype or "bf16", args.kv_dtype or "bf16"
    args.engine = args.engine or "vllm"
    try:
        shape = load_model(args.model)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    if not from_kernels.room_for_kv(shape.name, hw.name, args.tp, dtype, kv_dtype):
        spec = profiles.find_model(shape.name)
        raise ScenarioError(
            f"{shape.name} in {dtype} ({spec.weight_bytes(dtype) / 2 ** 30:.1f} GiB of "
            f"weights) leaves no room for a KV cache on {args.tp} x {hw.name} "
            f"({hw.planning_memory / 2 ** 30:.1f} GiB each)")
    out = Path(args.out) if args.out else from_kernels.default_folder(hw.name, args.engine)
    check_profile_files(out / profile_name(shape.name, args.tp, dtype, kv_dtype))
    try:
        profile = from_kernels.build(shape, hw.name, args.tp, args.engine, dtype, kv_dtype,
                                     hw.hbm_bandwidth, version=args.engine_version,
                                     root=args.kernel_db)
    except KernelDbError as exc:
        raise ScenarioError(str(exc)) from None
    try:
        path = from_kernels.write(profile, out)
    except OSError as exc:
        raise os_error(exc, out, started=True) from None
    if not args.quiet:
        src = profile["source"]
        print(f"{shape.name} tp={args.tp} {dtype} (KV {kv_dtype}) on {hw.name} from "
              f"{src['engine']} {src['engine_version']} kernels "
              f"(aiconfigurator-core {src['package_version']}):")
        for term, err in profile["fit_error"].items():
            if err["points"]:
                held = profile["held_back_error"][term]
                print(f"  {term:<13} {err['points']:5d} points: median {100 * err['median']:5.1f}%"
                      f" max {100 * err['max']:6.1f}%; held back: median "
                      + ("n/a" if held["median"] is None else f"{100 * held['median']:.1f}%"))
    print(f"wrote {shown(path)}")
    return 0


def is_profile(path: Path) -> bool:
    """True if ``path`` is a calibrated step-time profile (``kind:
    fleetsim-calibrated-step-time``), which `fleetsim calibrate` may replace."""
    import yaml
    try:
        with open(path, "rb") as fh:
            data = yaml.safe_load(fh.read(1 << 20))
    except (OSError, yaml.YAMLError, UnicodeError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("kind") == "fleetsim-calibrated-step-time"


def check_profile_files(profile: Path, *siblings: str) -> None:
    """Before the work: the profile (and its sibling files with these suffixes, the
    plot and the log) may be written, replacing only what `calibrate` wrote."""
    from sim.output.output_paths import check_file
    check_file(profile, kind="a calibrated profile fleetsim wrote", is_kind=is_profile)
    for suffix in siblings:
        check_file(profile.with_suffix(suffix), kind="the plot or log of a calibrated profile",
                   is_kind=lambda _p: is_profile(profile))


def _cmd_calibrate(args: argparse.Namespace) -> int:
    if args.source is not None:
        return _cmd_calibrate_from_kernels(args)
    for flag, value in (("--gpu", args.gpu), ("--engine", args.engine),
                        ("--engine-version", args.engine_version),
                        ("--kv-dtype", args.kv_dtype), ("--kernel-db", args.kernel_db)):
        if value is not None:
            raise ScenarioError(f"{flag} is for profiles built from measured kernels "
                                f"(--from aiconfigurator)")
    if args.dtype == "fp8":
        raise ScenarioError("--dtype fp8: torch calibration times fp32, bf16 or fp16; fp8 "
                            "profiles come from measured kernels (--from aiconfigurator)")
    try:
        from calibrate.microbench.run import calibrate
    except ImportError as exc:
        raise ScenarioError(f"calibration needs torch ({exc}); install it with "
                            f"pip install 'fleetsim[calibrate]'") from None
    from calibrate.microbench.run import device_slug, profile_stem
    from calibrate.fitting.shapes import load_model
    try:
        stem = profile_stem(load_model(args.model).name, args.tp)
    except ValueError as exc:
        raise ScenarioError(str(exc), field="--model") from None
    out = Path(args.out) if args.out else Path("profiles") / "calibrated" / device_slug(
        args.device)
    check_profile_files(out / f"{stem}.yaml", ".png", ".log")
    try:
        result = calibrate(args.model, device=args.device, tp=args.tp, out=args.out,
                           quick=args.quick, dtype=args.dtype, threads=args.threads,
                           max_tokens=args.max_tokens, echo=None if args.quiet else print)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    except (MemoryError, RuntimeError) as exc:
        # torch's allocator reports a failed allocation as a RuntimeError
        if not isinstance(exc, MemoryError) and "allocate" not in str(exc):
            raise
        raise ScenarioError(f"the model's layers do not fit in this machine's memory "
                            f"({type(exc).__name__} while allocating them): calibrate a "
                            "smaller model (its shape is what is timed) or a larger --tp",
                            field="--model") from None
    print(f"held-back relative error ({shown(result.yaml_path)}):")
    for term, err in result.errors.items():
        if err["points"]:
            print(f"  {term:<18} median {100 * err['median']:5.1f}%   "
                  f"max {100 * err['max']:5.1f}%   ({err['points']} points)")
    print(f"calibrated in {result.elapsed_s:.0f} s; wrote {shown(result.yaml_path)}, "
          f"{result.plot_path.name if result.plot_path else 'no plot'}, {result.log_path.name}")
    return 0


def add_calibrate(sub) -> None:
    cal = sub.add_parser("calibrate", help="benchmark a model's layer shapes with torch and "
                                           "write a calibrated step-time profile")
    add_torch_arguments(cal, dtypes=("fp32", "bf16", "fp16", "fp8"),
                        dtype_help="compute (weight) dtype (default: fp32 on cpu, bf16 on "
                                   "cuda and from measured kernels)")
    cal.add_argument("--from", dest="source", choices=("aiconfigurator",),
                     help="build the profile from GPU kernels measured on real GPUs "
                          "(NVIDIA AIConfigurator's database, pip install "
                          "'fleetsim[kernels]') instead of timing this machine")
    cal.add_argument("--gpu", help="with --from: the GPU (H100-SXM, H200, B200, A100-80GB, "
                                   "L40S)")
    cal.add_argument("--engine", choices=("vllm", "sglang", "trtllm"), default=None,
                     help="with --from: the engine whose kernels were timed (default: vllm)")
    cal.add_argument("--engine-version", help="with --from: that engine's version in the "
                                              "database (default: its newest)")
    cal.add_argument("--kv-dtype", choices=("bf16", "fp8"),
                     help="with --from: KV cache dtype (default: bf16)")
    cal.add_argument("--kernel-db", help=argparse.SUPPRESS)     # a copy of the database
    cal.add_argument("--quiet", action="store_true", help="print only the held-back errors")
    cal.set_defaults(func=_cmd_calibrate)
