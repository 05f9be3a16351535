"""``python -m calibrate <command>``: every tool of calibrate/ behind one command line.

Each subpackage declares its own commands (``<tool>/commands.py``: the arguments, and a
handler that imports the tool only when it runs, so that ``--help`` needs neither torch
nor the simulator). ``fleetsim`` mounts two of them: ``fleetsim calibrate`` is
``profile`` and ``fleetsim validate`` is ``validate``, the same arguments and handlers.

Exit codes as fleetsim's: 0 success, 2 bad input (reported as ``error: ...`` without a
traceback), 1 a failed check or engine.
"""
from __future__ import annotations

import argparse
import sys

from calibrate.engines import commands as engines
from calibrate.kernels import commands as kernels
from calibrate.microbench import commands as microbench
from calibrate.validate import commands as validate

# every command: its name -> the function that adds its parser to a subparsers action
COMMANDS = {**microbench.COMMANDS, **kernels.COMMANDS, **engines.COMMANDS,
            **validate.COMMANDS}

# what fleetsim mounts, under its own name: fleetsim's command -> calibrate's
MOUNTED = {"calibrate": "profile", "validate": "validate"}


def mount(sub, fleetsim_name: str) -> argparse.ArgumentParser:
    """Add calibrate's command that ``fleetsim fleetsim_name`` is to fleetsim's subparsers."""
    return COMMANDS[MOUNTED[fleetsim_name]](sub, fleetsim_name)


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad command line reported as one ``error:`` line (exit code 2)."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m calibrate",
                     description="Measure step times (torch microbenchmarks, measured GPU "
                                 "kernels, real engines) and validate fleetsim against them.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)
    for name, add in COMMANDS.items():
        add(sub, name)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.needs_simulator:        # runs where fleetsim is not (or is another's)
        return args.func(args)
    from sim.cli import run_parsed     # the simulator's errors, reported as fleetsim does
    return run_parsed(args)


if __name__ == "__main__":
    sys.exit(main())
