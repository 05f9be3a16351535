"""The measured kernels' commands: ``profile --from aiconfigurator``'s arguments (added to
``profile``, whose handler builds from the kernels: ``from_kernels.command``), ``gpu-profiles`` (the shipped GPU profiles rebuilt) and
``roofline-fit`` (the roofline's constants fitted). The database and the simulator are
imported only when a command runs."""
from __future__ import annotations

import argparse


def add_from_kernels_arguments(cal: argparse.ArgumentParser) -> None:
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


def _gpu_profiles(args: argparse.Namespace) -> int:
    from calibrate.kernels.gpu_profiles import command
    return command(args)


def add_gpu_profiles(sub, name: str) -> argparse.ArgumentParser:
    ap = sub.add_parser(name, help="rebuild the shipped GPU profiles from the measured-kernel "
                                   "database")
    ap.add_argument("--out", default="profiles/calibrated/gpu",
                    help="output folder (default: %(default)s)")
    ap.add_argument("--engine", default="vllm", choices=("vllm", "sglang", "trtllm"),
                    help="the engine whose kernels were timed (default: vllm)")
    ap.set_defaults(func=_gpu_profiles, needs_simulator=True)
    return ap


def _roofline_fit(args: argparse.Namespace) -> int:
    from calibrate.kernels.roofline_report import command
    return command(args)


def add_roofline_fit(sub, name: str) -> argparse.ArgumentParser:
    ap = sub.add_parser(name, help="fit the roofline's constants per operation to the "
                                   "measured kernels, and report its distance from them")
    ap.add_argument("--out", default="profiles/calibrated/gpu",
                    help="output folder (default: %(default)s)")
    ap.set_defaults(func=_roofline_fit, needs_simulator=True)
    return ap


COMMANDS = {"gpu-profiles": add_gpu_profiles, "roofline-fit": add_roofline_fit}
