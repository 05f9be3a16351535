"""The real engines' commands: ``validate`` (``fleetsim validate``: validation scenarios
served on transformers or vLLM, or recorded runs analysed again, against fleetsim's
predictions), ``vllm-host`` (vLLM V1's host time per step: ``record`` and ``fit``) and
``vllm-ship`` (a served vLLM run copied into the tests' data).

Each handler imports its tool when it runs: ``--help`` needs neither the simulator nor
torch, transformers or vLLM."""
from __future__ import annotations

import argparse
from pathlib import Path

from calibrate.arguments import bounded, named_path

MAX_REPLAYS = 1000


def _validate(args: argparse.Namespace) -> int:
    from calibrate.engines.validation import validate
    return validate(args)


def add_validate(sub, name: str) -> argparse.ArgumentParser:
    val = sub.add_parser(name, help="serve validation scenarios on a real engine "
                                    "(transformers, this CPU) and compare fleetsim's "
                                    "predictions with the measurements")
    val.add_argument("scenarios", nargs="*", help="validation scenarios (scenarios/validate/)")
    val.add_argument("--from-logs", nargs="+", metavar="PATH",
                     help="redo the fit and the comparison on recorded engine logs (a folder "
                          "fleetsim validate wrote, or its engine_log.json.gz files) with "
                          "the simulator as it is now; nothing is served or timed")
    val.add_argument("--engine", choices=("transformers", "vllm"), default="transformers",
                     help="the real engine: transformers' continuous batching (default), or "
                          "vLLM's CPU build (make vllm), compared step by step")
    val.add_argument("--out", type=named_path, help="output folder (default: results/validate, "
                                                    "or results/validate-vllm)")
    val.add_argument("--force", action="store_true",
                     help="replace an output folder an earlier fleetsim run wrote")
    val.add_argument("--recalibrate", action="store_true",
                     help="calibrate this machine even if a profile made on it exists")
    val.add_argument("--quick", action="store_true",
                     help="a smaller grid for the engine's step-time fit")
    val.add_argument("--replays", type=bounded(MAX_REPLAYS), default=None,
                     help="times the engine serves each workload, each just after a pass "
                          "over the calibration grid (default 3)")
    val.add_argument("--strict", action="store_true",
                     help="exit 1 when a figure misses its target error")
    val.add_argument("--quiet", action="store_true", help="print only the table")
    val.set_defaults(func=_validate, needs_simulator=True)
    return val


def _vllm_host(args: argparse.Namespace) -> int:
    from calibrate.engines.vllm_cpu.host import command
    return command(args)


def add_vllm_host(sub, name: str) -> argparse.ArgumentParser:
    ap = sub.add_parser(name, help="vLLM V1's host time per step on this CPU (a stub model), "
                                   "and its linear fit")
    steps = ap.add_subparsers(dest="step", required=True, metavar="STEP")
    rec = steps.add_parser("record", help="run vLLM with a stub executor over the grid")
    rec.add_argument("--out", required=True, type=Path, help="the JSONL log to write")
    rec.add_argument("--reps", type=bounded(10_000), default=12, help="passes over the grid")
    rec.add_argument("--seed", type=int, default=0)
    fit = steps.add_parser("fit", help="fit c0 + c1*B + c2*prompt_tokens per stage")
    fit.add_argument("log", type=Path)
    fit.add_argument("--out", type=Path, help="the YAML to write (default: none)")
    ap.set_defaults(func=_vllm_host, needs_simulator=True)
    return ap


def _vllm_ship(args: argparse.Namespace) -> int:
    from calibrate.engines.vllm_cpu.engine import ship_run
    return ship_run(args.run_folder, args.dest)


def add_vllm_ship(sub, name: str) -> argparse.ArgumentParser:
    ap = sub.add_parser(name, help="copy a served vLLM run's workloads and its "
                                   "equivalence.json into the tests' data (make vllm-recorded)")
    ap.add_argument("run_folder", type=Path, help="a folder validate --engine vllm wrote")
    ap.add_argument("dest", type=Path, help="where the tests read it (tests/data/vllm-recorded)")
    ap.set_defaults(func=_vllm_ship, needs_simulator=True)
    return ap


COMMANDS = {"validate": add_validate, "vllm-host": add_vllm_host, "vllm-ship": add_vllm_ship}
