"""``validate`` (``fleetsim validate``): validation scenarios served on a real engine, or
recorded runs analysed again, and fleetsim's predictions compared with what the engine
measured: on transformers' continuous batching (``engines.hf``) or, with ``--engine
vllm``, on vLLM's CPU build step by step (``engines.vllm_cpu``). Neither engine is
imported here: transformers is looked for before anything is timed, vLLM runs in its
own environment."""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from calibrate.engines.hf import ValidationError, format_table, validate_logs
from calibrate.engines.hf import validate as serve_and_compare
from calibrate.engines.hf.engine_log import EngineLogError
from calibrate.engines.vllm_cpu import engine as vllm_engine
from calibrate.engines.vllm_cpu import targets
from calibrate.engines.vllm_cpu.run_folder import VllmError, vllm_python
from calibrate.engines.vllm_cpu.schedule import ServeLogError
from sim.cli.common import allowed_paths, inputs_of
from sim.config.errors import ScenarioError
from sim.config.inputs import shown
from sim.output.files.atomic_write import write_folder
from sim.output.files.output_paths import prepare_folder


def _validate_vllm(args: argparse.Namespace) -> int:
    """``validate --engine vllm``: serve on vLLM (or read recorded runs) and compare each
    step's schedule with fleetsim's."""
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
    if args.from_logs and (args.recalibrate or args.quick or args.replays is not None):
        raise ScenarioError("validate --from-logs: --recalibrate, --quick and --replays "
                            "shape the engine's run, which a recorded run has done already")
    try:
        if not args.from_logs:              # the engine, looked for before anything is timed
            importlib.import_module("transformers")
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
            report = serve_and_compare(args.scenarios, out, force=args.force,
                                       recalibrate=args.recalibrate, quick_fit=args.quick,
                                       replays=3 if args.replays is None else args.replays,
                                       log=log)
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


def validate(args: argparse.Namespace) -> int:
    """``validate``: on vLLM with ``--engine vllm``, else on transformers."""
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
