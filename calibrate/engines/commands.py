"""The real engines' commands: ``validate`` (``fleetsim validate``: validation scenarios
served on transformers or vLLM, or recorded runs analysed again, against fleetsim's
predictions), ``vllm-host`` (vLLM V1's host time per step: ``record`` and ``fit``) and
``vllm-ship`` (a served vLLM run copied into the tests' data).

Each handler imports its engine's modules and the simulator when it runs: ``--help``
needs neither torch, transformers nor vLLM."""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from calibrate.arguments import bounded, named_path

MAX_REPLAYS = 1000


def _validate_vllm(args: argparse.Namespace) -> int:
    """``validate --engine vllm``: serve on vLLM (or read recorded runs) and compare each
    step's schedule with fleetsim's."""
    from calibrate.engines.vllm_cpu import engine as vllm_engine
    from calibrate.engines.vllm_cpu import targets
    from calibrate.engines.vllm_cpu.run_folder import VllmError, vllm_python
    from calibrate.engines.vllm_cpu.schedule import ServeLogError
    from sim.cli.common import allowed_paths, inputs_of
    from sim.config.errors import ScenarioError
    from sim.output.atomic_write import write_folder
    from sim.output.output_paths import prepare_folder
    if args.recalibrate or args.quick or args.replays is not None:
        raise ScenarioError("validate --engine vllm: --recalibrate, --quick and --replays "
                            "belong to the transformers engine")
    log = (lambda _m: None) if args.quiet else print
    try:
        if args.from_logs:
            folders = vllm_engine.recorded(args.from_logs)
        else:
            plans = [vllm_engine.plan(p, tuple(allowed_paths(args))) for p in args.scenarios]
            python = vllm_python()
    except (VllmError, ServeLogError) as exc:
        raise ScenarioError(str(exc)) from None
    out = Path(args.out) if args.out else Path("results") / "validate-vllm"
    out = prepare_folder(out, force=args.force, inputs=inputs_of(args))
    done: list = []

    def write(tmp: Path) -> list[Path]:     # the folder appears whole, or not at all
        if args.from_logs:
            rows = vllm_engine.compare_recorded(folders, tmp)
        else:
            rows = vllm_engine.serve_all(plans, tmp, python, log=log)
        done.append((rows, targets.write_report(rows, tmp)))
        return [p for p in tmp.rglob("*") if p.is_file()]

    try:
        write_folder(write, out, force=args.force, inputs=inputs_of(args),
                     command="validate --engine vllm")
    except (VllmError, ServeLogError) as exc:
        raise ScenarioError(str(exc)) from None
    except RuntimeError as exc:              # vLLM itself failed or hung
        print(f"error: the engine: {exc}", file=sys.stderr)
        return 1
    rows, report = done[0]
    print(report)
    missed = [f"{r['workload']}: {m}" for r in rows for m in targets.missed_targets(r)]
    if args.strict and missed:
        print(f"{len(missed)} figure(s) outside their target:\n  " + "\n  ".join(missed),
              file=sys.stderr)
        return 1
    return 0


def _validate_transformers(args: argparse.Namespace) -> int:
    """``validate`` on transformers' continuous batching (or its recorded runs)."""
    from sim.cli.common import inputs_of
    from sim.config.errors import ScenarioError
    from sim.config.inputs import shown
    from sim.output.output_paths import prepare_folder
    if args.from_logs and (args.recalibrate or args.quick or args.replays is not None):
        raise ScenarioError("validate --from-logs: --recalibrate, --quick and --replays "
                            "shape the engine's run, which a recorded run has done already")
    try:
        if not args.from_logs:
            importlib.import_module("transformers")  # the engine, before anything is timed
        from calibrate.engines.hf import ValidationError, format_table, validate, validate_logs
        from calibrate.engines.hf.engine_log import EngineLogError
    except ImportError as exc:
        raise ScenarioError(f"validation needs torch and transformers ({exc}); install them "
                            f"with pip install 'fleetsim[validate]'") from None
    out = Path(args.out) if args.out else Path("results") / (
        "validate-from-logs" if args.from_logs else "validate")
    out = prepare_folder(out, force=args.force, inputs=inputs_of(args))
    log = (lambda _m: None) if args.quiet else print
    try:
        if args.from_logs:
            report = validate_logs(args.from_logs, out, force=args.force, log=log)
        else:
            report = validate(args.scenarios, out, force=args.force,
                              recalibrate=args.recalibrate, quick_fit=args.quick,
                              replays=3 if args.replays is None else args.replays, log=log)
    except (ValidationError, EngineLogError) as exc:
        raise ScenarioError(str(exc)) from None
    except RuntimeError as exc:              # the engine itself failed or hung
        if args.from_logs:                   # no engine ran: the recorded run is at fault
            raise ScenarioError(f"{exc} (in the recorded run)", field="--from-logs") from None
        print(f"error: the engine: {exc}", file=sys.stderr)
        return 1
    print(format_table(report))
    print(f"wrote {shown(out)}/validation.{{txt,csv,json}}, {shown(out)}/ttft_cdf.png "
          f"and each workload's "
          f"engine and simulated requests")
    missed = [row for row in report.rows() if row["within_target"] is False]
    if args.strict and missed:
        print(f"{len(missed)} figure(s) outside their target", file=sys.stderr)
        return 1
    return 0


def _validate(args: argparse.Namespace) -> int:
    from sim.config.errors import ScenarioError
    if args.engine == "vllm":
        if bool(args.scenarios) == bool(args.from_logs):
            raise ScenarioError("validate --engine vllm: give validation scenarios (to serve "
                                "them on vLLM) or --from-logs PATH (recorded runs), not both "
                                "or neither")
        return _validate_vllm(args)
    if bool(args.scenarios) == bool(args.from_logs):
        raise ScenarioError("validate: give validation scenarios (to serve them on the "
                            "engine) or --from-logs PATH (to analyse a recorded run), not "
                            "both or neither")
    return _validate_transformers(args)


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
