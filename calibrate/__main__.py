"""``python -m calibrate``: the same as ``fleetsim calibrate``, for a host that has
torch, numpy, PyYAML and matplotlib but not the simulator's other dependencies."""
from __future__ import annotations

import argparse
import sys

from calibrate.arguments import add_torch_arguments


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m calibrate",
                                     description="Write a calibrated step-time profile.")
    add_torch_arguments(parser)
    args = parser.parse_args(argv)
    from calibrate.microbench.run import calibrate
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
