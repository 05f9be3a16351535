"""``python -m calibrate``: the same as ``fleetsim calibrate``, for a host that has
torch, numpy, PyYAML and matplotlib but not the simulator's other dependencies."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m calibrate",
                                     description="Write a calibrated step-time profile.")
    parser.add_argument("--model", required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--out")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"))
    parser.add_argument("--threads", type=int)
    parser.add_argument("--max-tokens", type=int)
    args = parser.parse_args(argv)
    from calibrate.run import calibrate
    try:
        result = calibrate(args.model, device=args.device, tp=args.tp, out=args.out,
                           quick=args.quick, dtype=args.dtype, threads=args.threads,
                           max_tokens=args.max_tokens)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {result.yaml_path} in {result.elapsed_s:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
