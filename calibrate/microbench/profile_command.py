"""``profile`` (``fleetsim calibrate``): a calibrated step-time profile, timed on this
machine with torch (``microbench.run``, imported when it runs: torch is optional) or
built from measured GPU kernels (``kernels.from_kernels``)."""
from __future__ import annotations

import argparse
from pathlib import Path

from calibrate.fitting.shapes import load_model
from calibrate.kernels.from_kernels import command as from_kernels_command
from calibrate.output import check_profile_files
from sim.config.errors import ScenarioError
from sim.config.inputs import shown


def profile(args: argparse.Namespace) -> int:
    """``profile`` (``fleetsim calibrate``): with ``--from``, built from measured kernels;
    else timed here with torch, the profile's files checked before anything is timed."""
    if args.source is not None:
        return from_kernels_command(args)
    for flag, value in (("--gpu", args.gpu), ("--engine", args.engine),
                        ("--engine-version", args.engine_version),
                        ("--kv-dtype", args.kv_dtype), ("--kernel-db", args.kernel_db)):
        if value is not None:
            raise ScenarioError(f"{flag} is for profiles built from measured kernels "
                                f"(--from aiconfigurator)")
    if args.dtype == "fp8":
        raise ScenarioError("--dtype fp8: torch calibration times fp32, bf16 or fp16; fp8 "
                            "profiles come from measured kernels (--from aiconfigurator)")
    try:                                # torch is optional: named with its fix
        from calibrate.microbench.run import calibrate, device_slug, profile_stem
    except ImportError as exc:
        raise ScenarioError(f"calibration needs torch ({exc}); install it with "
                            f"pip install 'fleetsim[calibrate]'") from None
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
