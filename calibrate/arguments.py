"""Argument types shared by calibrate's commands, and the arguments of a torch calibration
(``profile``, which is ``fleetsim calibrate``). Nothing here imports the simulator:
``python -m calibrate --help`` builds every command's parser without it."""
from __future__ import annotations

import argparse

MAX_TP = 64
MAX_THREADS = 256
MAX_STEP_TOKENS = 1_048_576


def bounded(most: int, least: int = 1):
    """An argparse type: a whole number from ``least`` to ``most``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"a whole number, got {text!r}") from None
        if not least <= value <= most:
            raise argparse.ArgumentTypeError(f"must be from {least:,} to {most:,}, "
                                             f"got {text!r}")
        return value
    return parse


# a step budget below this leaves the fit of the terms a handful of points: the profile
# it gives predicts whole forwards many times off
MIN_STEP_TOKENS = 64


def named_path(text: str) -> str:
    """An argparse type: a path that names something (an empty one would mean here)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a folder or file")
    return text


def add_torch_arguments(parser: argparse.ArgumentParser, dtypes=("fp32", "bf16", "fp16"),
                        dtype_help: str = "compute (weight) dtype (default: fp32 on cpu, "
                                          "bf16 on cuda)") -> None:
    """The model, device, shard, output folder, size and threads of a calibration."""
    parser.add_argument("--model", required=True,
                        help="model profile name (e.g. tiny-llama) or a model YAML file")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where to run the benchmarks (default: cpu)")
    parser.add_argument("--tp", type=bounded(MAX_TP), default=1,
                        help="tensor-parallel degree whose shard shapes are timed (default: 1)")
    parser.add_argument("--out", type=named_path,
                        help="output folder (default: profiles/calibrated/<device>/)")
    parser.add_argument("--quick", action="store_true",
                        help="few points and small sizes (a smoke test, not a usable profile)")
    parser.add_argument("--dtype", choices=dtypes, help=dtype_help)
    parser.add_argument("--threads", type=bounded(MAX_THREADS), help="CPU threads (default: 1)")
    parser.add_argument("--max-tokens", type=bounded(MAX_STEP_TOKENS, MIN_STEP_TOKENS),
                        help="largest step in tokens (default: 2048 on cpu, 16384 on cuda)")
