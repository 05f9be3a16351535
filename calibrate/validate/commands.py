"""The published results' commands: ``validate-gpu`` (fleetsim against published results
of real engines on real GPUs) and ``operating-point`` (the measured kernels' step at each
Server row's load). ``validate-gpu`` imports no part of the simulator before it runs:
``--before-checkout`` runs an earlier checkout's."""
from __future__ import annotations

import argparse
from pathlib import Path

# the table both commands read by default
DEFAULT_TABLE = Path("scenarios/validate/gpu/published.yaml")


def _validate_gpu(args: argparse.Namespace) -> int:
    from calibrate.validate.published import command
    return command(args)


def add_validate_gpu(sub, name: str) -> argparse.ArgumentParser:
    ap = sub.add_parser(name, help="fleetsim against published results of real engines on "
                                   "real GPUs (scenarios/validate/gpu/published.yaml)")
    ap.add_argument("--table", type=Path, default=DEFAULT_TABLE,
                    help="the published table (default: %(default)s)")
    ap.add_argument("--cost-model", action="append", choices=("scenario", "auto", "roofline"),
                    default=None,
                    help="every pool's cost model: scenario (what each scenario says, "
                         "fleetsim's default when it says nothing), auto or roofline; "
                         "repeat to compare (default: scenario)")
    ap.add_argument("--only", action="append", default=[],
                    help="run only this row (by name; repeatable)")
    ap.add_argument("--out", type=Path, default=None,
                    help="write validation-gpu.json and validation-gpu.md here")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when a headline target of the first cost model is missed")
    ap.add_argument("--before-checkout", type=Path, default=None,
                    help="run the Poisson rows on the fleetsim checked out here (e.g. a git "
                         "worktree of an earlier commit) instead of this one, with its "
                         "default cost model: the table's 'before' column")
    ap.set_defaults(func=_validate_gpu, needs_simulator=False)
    return ap


def _operating_point(args: argparse.Namespace) -> int:
    from calibrate.validate.operating_point import command
    return command(args)


def add_operating_point(sub, name: str) -> argparse.ArgumentParser:
    ap = sub.add_parser(name, help="the measured kernels' step at each Server row's "
                                   "published operating point, beside its TPOT")
    ap.add_argument("--table", type=Path, default=DEFAULT_TABLE,
                    help="the published table (default: %(default)s)")
    ap.set_defaults(func=_operating_point, needs_simulator=True)
    return ap


COMMANDS = {"validate-gpu": add_validate_gpu, "operating-point": add_operating_point}
