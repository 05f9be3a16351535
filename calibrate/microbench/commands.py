"""The microbenchmarks' commands: ``profile`` (``fleetsim calibrate``: a step-time profile
timed on this machine with torch, or with ``--from`` built from measured GPU kernels) and
``tokenise-time`` (the front end's tokeniser). Nothing here imports torch: each handler
imports what it runs."""
from __future__ import annotations

import argparse
from calibrate.arguments import add_torch_arguments
from calibrate.kernels.commands import add_from_kernels_arguments


def _profile(args: argparse.Namespace) -> int:
    from calibrate.microbench.profile_command import profile
    return profile(args)


def add_profile(sub, name: str) -> argparse.ArgumentParser:
    cal = sub.add_parser(name, help="benchmark a model's layer shapes with torch and "
                                    "write a calibrated step-time profile")
    add_torch_arguments(cal, dtypes=("fp32", "bf16", "fp16", "fp8"),
                        dtype_help="compute (weight) dtype (default: fp32 on cpu, bf16 on "
                                   "cuda and from measured kernels)")
    add_from_kernels_arguments(cal)
    cal.add_argument("--quiet", action="store_true", help="print only the held-back errors")
    cal.set_defaults(func=_profile, needs_simulator=True)
    return cal


def _tokenise_time(args: argparse.Namespace) -> int:
    from calibrate.microbench.tokenise_time import command
    return command(args)


def add_tokenise_time(sub, name: str) -> argparse.ArgumentParser:
    ap = sub.add_parser(name, help="time a prompt's tokenisation on this machine (the "
                                   "engine front end's cost per prompt token)")
    ap.add_argument("--vocab", type=int, default=32000, help="BPE vocabulary (default: 32000)")
    ap.add_argument("--repeats", type=int, default=7, help="timings per size (default: 7)")
    ap.set_defaults(func=_tokenise_time, needs_simulator=False)
    return ap


COMMANDS = {"profile": add_profile, "tokenise-time": add_tokenise_time}
