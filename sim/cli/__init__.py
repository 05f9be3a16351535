"""The ``fleetsim`` command line.

Exit codes: 0 success, 2 bad input (scenario, flags, output folder), 1 an
internal error or a write that failed after the work ran. Bad input is
reported as ``error: file:line: field: message`` without a traceback; an
output that cannot be written is found before the work starts. What may be
written where is :mod:`sim.output.files.output_paths`'s.
"""
from __future__ import annotations

import argparse
import atexit
import os
import re
import sys
import threading

# pydantic looks for plugins (observers of every validation) among the entry points of
# every installed package when it builds its first model: a tenth of a small run's cost
# beyond its simulation, for plugins the command never asks for. The user's own setting
# stands. (Before any of fleetsim's models are built: ``import sim`` builds none.)
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from sim.version import __version__  # noqa: E402
from sim.cli.calibrate import add_calibrate  # noqa: E402
from sim.cli.inspect import add_inspect  # noqa: E402
from sim.cli.planning import add_planning  # noqa: E402
from sim.cli.run import add_run  # noqa: E402
from sim.cli.validate import add_validate  # noqa: E402
from sim.config.errors import ScenarioError, format_cli_error  # noqa: E402


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad command line reported as every other error is: one line
    starting with ``error:``, the help to read named, exit code 2."""

    def error(self, message: str):
        flag = re.fullmatch(r"argument (--[\w-]+)(?:/-\w)?: expected one argument", message)
        if flag:    # argparse reads a value such as -1s as a flag of its own
            message += f" (a value that starts with '-' is written {flag.group(1)}=VALUE)"
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fleetsim", description="Discrete-event capacity planner for LLM serving fleets.")
    parser.add_argument("--version", action="version", version=f"fleetsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)
    add_run(sub)
    add_planning(sub)
    add_inspect(sub)
    add_calibrate(sub)
    add_validate(sub)
    for name, command in sub.choices.items():
        command.formatter_class = argparse.RawDescriptionHelpFormatter
        command.epilog = "examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES[name])
    return parser


# what each command's --help ends with (each parses: tests/test_cli.py)
EXAMPLES = {
    "run": ["fleetsim run scenarios/quickstart.yaml",
            "fleetsim run scenarios/quickstart.yaml --duration 10min --seed 3 --out results/q",
            "fleetsim run scenarios/quickstart.yaml --replications 8 --workers 2 --warmup 60s",
            "fleetsim run scenarios/quickstart.yaml --set pools.main.replicas=4"],
    "size": ["fleetsim size scenarios/chat-70b.yaml --slo ttft_p99=2s --slo tpot_p99=50ms",
             "fleetsim size scenarios/chat-70b.yaml --slo ttft_p99=2s --out results/sized "
             "--report",
             "fleetsim size scenarios/disaggregated.yaml --slo ttft_p99=1s --slo tpot_p99=30ms "
             "--joint prefill,decode",
             "fleetsim size scenarios/v3-gateway.yaml --slo ttft_p99=2s --autoscaled",
             "fleetsim size scenarios/quickstart.yaml --slo ttft_p99=1s --max-rate"],
    "sweep": ["fleetsim sweep scenarios/quickstart.yaml --vary pools.main.replicas=1..4 "
              "--vary workload.rate_scale=1,2 --workers 2 --report sweep.html"],
    "compare": ["fleetsim compare results/quickstart results/quickstart-bigger",
                "fleetsim compare a.yaml b.yaml c.yaml --json"],
    "check": ["fleetsim check scenarios/quickstart.yaml --baseline baseline.json "
              "--slo ttft_p99=2s --update",
              "fleetsim check scenarios/quickstart.yaml --baseline baseline.json "
              "--slo ttft_p99=2s --tolerance 5%"],
    "schema": ["fleetsim schema --out fleetsim.schema.json"],
    "lint": ["fleetsim lint scenarios/*.yaml"],
    "profiles": ["fleetsim profiles"],
    "scenarios": ["fleetsim scenarios"],
    "import-model": ["fleetsim import-model config.json --name my-model "
                     "--out profiles/models/my-model.yaml"],
    "calibrate": ["fleetsim calibrate --model tiny-llama --quick"],
    "validate": ["fleetsim validate scenarios/validate/*.yaml",
                 "fleetsim validate --engine vllm --from-logs tests/data/vllm-recorded"],
}


# Commands whose only product is what they print: a reader that goes away early
# (`fleetsim schema | head`) is not a failure for them (exit 0). For the others a
# closed or full standard output is an error naming <stdout> with exit 1: the work
# ran (and its files, if any, were saved), but what it printed was lost.
_PRINT_ONLY = ("schema", "profiles", "scenarios", "lint", "compare")


class _StdoutError(Exception):
    """An OSError met writing to standard output (not to an output file)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class _Stdout:
    """``sys.stdout`` whose write errors are told apart from any other OSError."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise _StdoutError(exc) from None

    def flush(self):
        try:
            return self._stream.flush()
        except OSError as exc:
            raise _StdoutError(exc) from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _reason(exc: OSError) -> str:
    if isinstance(exc, BrokenPipeError):
        return "reader went away"
    return exc.strerror or str(exc) or type(exc).__name__


def _stdout_failed(args: argparse.Namespace, reason: str) -> int:
    _silence_stdout()
    if args.command in _PRINT_ONLY and reason == "reader went away":
        return 0
    print(f"error: <stdout>: cannot print the output: {reason} (the work ran; any files "
          f"were written)", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    return run_parsed(build_parser().parse_args(argv))


def run_parsed(args: argparse.Namespace) -> int:
    """Run a parsed command (``args.func``) as fleetsim runs each: its errors reported as
    ``error:`` lines with their exit codes, standard output's failures told apart. Also
    how ``python -m calibrate`` runs its commands that use the simulator."""
    real_stdout = sys.stdout
    if real_stdout is not None:
        sys.stdout = _Stdout(real_stdout)
    try:
        return _main(args)
    finally:
        sys.stdout = real_stdout


def entry() -> None:
    """The ``fleetsim`` command: :func:`main`, then an exit that skips tearing down the
    imported modules (pydantic's models, pandas, pyarrow: about a quarter of a second of
    a small run). Everything an orderly exit does for the outside world still happens
    first: the exit handlers run (temporary folders, worker processes) and both streams
    are flushed. With a thread still running, or a stream that cannot be flushed, the
    exit is Python's own."""
    code = main()
    if threading.active_count() == 1:
        atexit._run_exitfuncs()
        try:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
        except (OSError, ValueError):
            sys.exit(code)
        os._exit(code)
    sys.exit(code)


def _main(args: argparse.Namespace) -> int:
    try:
        code = args.func(args)
        if sys.stdout is None:
            quiet = getattr(args, "quiet", False) and args.command not in ("check", "size")
            return code if quiet else _stdout_failed(args, "standard output is closed")
        sys.stdout.flush()          # a closed pipe or a full disk shows here, not at exit
        return code
    except _StdoutError as exc:
        return _stdout_failed(args, _reason(exc.error))
    except ScenarioError as exc:
        print(format_cli_error(exc), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError as exc:  # not stdout's: a worker's or an engine's pipe
        print(format_cli_error(exc), file=sys.stderr)
        return 1
    except (OSError, UnicodeError) as exc:
        print(format_cli_error(exc), file=sys.stderr)
        return 2


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the exit's flush does not fail again."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
    except (OSError, ValueError, AttributeError):
        pass
