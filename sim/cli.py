"""The ``fleetsim`` command line.

Exit codes: 0 success, 2 bad input (scenario, flags, output folder), 1 an
internal error or a write that failed after the work ran. Bad input is
reported as ``error: file:line: field: message`` without a traceback; an
output that cannot be written is found before the work starts. What may be
written where is :mod:`sim.output_paths`'s.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sim import profiles, units
from sim.errors import ScenarioError, format_cli_error
from sim.output_paths import slug


def _duration(text: str) -> float:
    try:
        value = units.seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, got {text!r}") from None


def _positive_int(text: str) -> int:
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def _path(text: str) -> str:
    """An argparse type: a path that names something (an empty one would mean here)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a folder or file")
    return text


MAX_REPLICATIONS = 10_000
MAX_WORKERS = 256


def _count(most: int):
    """An argparse type: a whole number from 1 to ``most``."""
    def parse(text: str) -> int:
        value = _whole(text)
        if not 1 <= value <= most:
            raise argparse.ArgumentTypeError(f"must be from 1 to {most:,}, got {text!r}")
        return value
    return parse


class _Progress:
    """A progress bar on stderr, shown only once a run has taken a few seconds."""

    def __init__(self, after_s: float = 2.0) -> None:
        self._t0 = time.perf_counter()
        self._after_s = after_s
        self._bar = None
        self._task = None

    def __call__(self, now_s: float, limit_s: float) -> None:
        if self._bar is None:
            if time.perf_counter() - self._t0 < self._after_s:
                return
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
            self._bar = Progress(TextColumn("simulating"), BarColumn(),
                                 TextColumn("{task.completed:,.0f} / {task.total:,.0f} s"),
                                 TimeElapsedColumn(), console=Console(stderr=True),
                                 transient=True)
            self._bar.start()
            self._task = self._bar.add_task("run", total=limit_s)
        self._bar.update(self._task, completed=min(now_s, limit_s))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def _load(args: argparse.Namespace):
    import sim
    from sim.planning.overrides import parse_value, with_values

    scenario = sim.load_scenario(args.scenario, allow_paths=_allowed(args))
    scenario = sim.with_overrides(scenario, seed=getattr(args, "seed", None),
                                  duration_s=getattr(args, "duration", None))
    sets = {}
    for item in getattr(args, "set", None) or []:
        path, eq, value = item.partition("=")
        if not eq or not path.strip():
            raise ScenarioError(f"--set {item!r}: write PATH=VALUE, e.g. "
                                "pools.main.replicas=4", field="--set")
        sets[path] = parse_value(value)
    if getattr(args, "warmup", None) is not None:
        sets["warmup"] = args.warmup
    return with_values(scenario, sets) if sets else scenario


def _allowed(args: argparse.Namespace) -> list[str]:
    """Folders given with --allow-path, each an existing folder."""
    found = list(getattr(args, "allow_path", None) or [])
    for folder in found:
        if not Path(folder).expanduser().is_dir():
            raise ScenarioError(f"{folder!r} is not a folder", field="--allow-path")
    return found


def _add_allow_path(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-path", action="append", metavar="DIR",
                        help="also read the data files a scenario names (traces, lengths, "
                             "calibrated profiles) from this folder; by default only the "
                             "scenario's folder and fleetsim's shipped data (repeatable)")


def _inputs(args: argparse.Namespace, scenario=None) -> list[str]:
    """The files a command reads (and those ``scenario`` names: traces, lengths,
    calibrated profiles), which its output must never replace."""
    found = [getattr(args, "scenario", None), getattr(args, "sweep", None)]
    found += list(getattr(args, "scenarios", None) or [])
    found += list(getattr(args, "from_logs", None) or [])
    if scenario is not None:
        from sim.api import data_files
        found += [str(p) for p in data_files(scenario)]
    return [f for f in found if f]


class _CountBar:
    """A progress bar of points done on stderr, started at the first update
    (so that an input error is printed alone)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar = None
        self.task = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
            self.bar = Progress(TextColumn(self.label), BarColumn(), MofNCompleteColumn(),
                                console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task(self.label, total=total)
            self.bar.start()
        self.bar.update(self.task, completed=done, total=total)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _bar(label: str):
    bar = _CountBar(label)
    return bar, bar


def _cmd_replications(args: argparse.Namespace, scenario) -> int:
    from sim.planning.overrides import with_values
    from sim.planning.runner import run_many
    from sim.planning.stats import aggregate

    from sim.output_paths import prepare_folder
    from sim.outputs import write_folder

    default = Path("results") / f"{slug(scenario.name)}-replications"
    out_dir = Path(args.out) if args.out else default
    inputs = _inputs(args, scenario)
    out_dir = prepare_folder(out_dir, force=args.force, inputs=inputs)
    seeds = [scenario.seed + i for i in range(args.replications)]
    scenarios = [with_values(scenario, {"seed": s}) for s in seeds]
    bar, update = _bar("replications") if not args.quiet else (None, None)
    try:
        summaries = run_many(scenarios, workers=args.workers, progress=update)
    finally:
        if bar is not None:
            bar.stop()
    result = {"scenario": scenario.name, "seeds": seeds, "figures": aggregate(summaries),
              "replications": summaries}

    def write(folder: Path) -> list[Path]:
        path = folder / "replications.json"
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        return [path]

    write_folder(write, out_dir, force=args.force, inputs=inputs, command="run --replications")
    if args.json:
        print(json.dumps(result["figures"], indent=2))
    elif not args.quiet:
        figs = result["figures"]
        for key in ("latency_s.ttft.p50", "latency_s.ttft.p99", "latency_s.tpot.p50",
                    "latency_s.tpot.p99", "throughput.requests_per_s",
                    "throughput.output_tokens_per_s", "cost.usd_per_million_output_tokens"):
            f = figs.get(key)
            if f and f["mean"] is not None:
                hw = f["half_width"]
                print(f"{key:40s} {f['mean']:12.6g}" + (f" ± {hw:.3g}" if hw is not None else ""))
        print(f"{len(seeds)} replications (95% confidence intervals) -> "
              f"{out_dir}/replications.json")
    return 0


def _read_sweep(path: str):
    import pandas as pd

    from sim.inputs import InputFileError, open_regular, shown
    from sim.report import check_sweep_table
    try:
        with open_regular(path) as fh:
            table = pd.read_csv(fh, encoding="utf-8")
    except InputFileError as exc:
        raise ScenarioError(exc.message, file=shown(path), field="--sweep") from None
    except (OSError, ValueError):       # pandas' messages may quote the file
        raise ScenarioError("cannot read as a CSV table (a `fleetsim sweep` table)",
                            file=shown(path), field="--sweep") from None
    check_sweep_table(table, path)
    return table


def _cmd_run(args: argparse.Namespace) -> int:
    import sim
    from sim.outputs import write_outputs
    from sim.table import print_summary

    from sim.output_paths import prepare_folder

    if args.replications > 1 and args.sweep:
        raise ScenarioError("--sweep adds a sweep's curves to one run's report; it does not "
                            "go with --replications", field="--sweep")
    if args.workers > 1 and args.replications == 1:
        raise ScenarioError("--workers runs replications side by side: give --replications "
                            "N as well", field="--workers")
    scenario = _load(args)
    if args.replications > 1:
        return _cmd_replications(args, scenario)
    out_dir = Path(args.out) if args.out else Path("results") / slug(scenario.name)
    inputs = _inputs(args, scenario)
    out_dir = prepare_folder(out_dir, force=args.force, inputs=inputs)
    sweep = _read_sweep(args.sweep) if args.sweep else None
    progress = _Progress() if not args.quiet else None
    try:
        results = sim.run(scenario, progress=progress)
    finally:
        if progress is not None:
            progress.close()
    written = write_outputs(results, out_dir, force=args.force, sweep=sweep, inputs=inputs)
    if args.json:
        print(json.dumps(results.summary, indent=2))
    elif not args.quiet:
        print_summary(results.summary)
        print(f"wrote {len(written)} files to {out_dir}/ "
              f"(simulated {results.summary['end_s']:,.0f} s in {results.wall_s:.1f} s)")
    return 0


def _slos(args: argparse.Namespace) -> list:
    from sim.planning.slo import parse_slo
    slos = [parse_slo(text) for text in args.slo or []]
    metrics = [s.metric for s in slos]
    for metric in dict.fromkeys(m for m in metrics if metrics.count(m) > 1):
        raise ScenarioError(f"--slo {metric}: given twice; give each metric one target",
                            field="--slo")
    return slos


def _cmd_size(args: argparse.Namespace) -> int:
    from sim.output_paths import prepare_folder
    from sim.outputs import csv_safe, write_folder
    from sim.planning.size import max_rate, size

    scenario = _load(args)
    slos = _slos(args)
    if not slos:
        raise ScenarioError("give at least one --slo, e.g. --slo ttft_p99=2s", field="--slo")
    pools = args.pool or None
    for p in pools or []:
        if p not in scenario.pools:
            raise ScenarioError(f"--pool: unknown pool '{p}'; pools: {', '.join(scenario.pools)}",
                                field="--pool")
    inputs = _inputs(args, scenario)
    out = prepare_folder(args.out, force=args.force, inputs=inputs) if args.out else None
    if args.max_rate:
        rates = [{"pool": pool, **max_rate(scenario, slos, pool)}
                 for pool in pools or list(scenario.pools)]
        if out is not None:
            def write_rates(folder: Path) -> list[Path]:
                path = folder / "max-rate.json"
                path.write_text(json.dumps(rates, indent=2) + "\n", encoding="utf-8")
                return [path]

            write_folder(write_rates, out, force=args.force, inputs=inputs,
                         command="size --max-rate")
        for row in rates:
            print(json.dumps(row))
        return 0
    table = size(scenario, slos, pools)
    if out is not None:
        def write(folder: Path) -> list[Path]:
            csv_safe(table).to_csv(folder / "size.csv", index=False)
            table.to_json(folder / "size.json", orient="records", indent=2)
            return [folder / "size.csv", folder / "size.json"]

        write_folder(write, out, force=args.force, inputs=inputs, command="size")
    with_pd_options(lambda: print(table.to_string(index=False)))
    return 0


def with_pd_options(fn) -> None:
    import pandas as pd
    with pd.option_context("display.width", 200, "display.max_columns", 50):
        fn()


def _cmd_sweep(args: argparse.Namespace) -> int:
    from sim.atomic_write import write_file
    from sim.output_paths import check_file
    from sim.planning.overrides import check_grid, parse_vary
    from sim.outputs import csv_safe
    from sim.planning.runner import DaskSchedulerError
    from sim.planning.sweep import sweep

    if args.scheduler is not None and args.executor != "dask":
        raise ScenarioError("--scheduler names a Dask scheduler: add --executor dask",
                            field="--scheduler")
    scenario = _load(args)
    varies = [parse_vary(v) for v in args.vary]
    check_grid(varies)
    out = Path(args.out) if args.out else Path("results") / f"{slug(scenario.name)}-sweep.csv"
    inputs = _inputs(args, scenario)
    out = check_file(out, kind="a `fleetsim sweep` table", is_kind=_is_sweep_table,
                     inputs=inputs)
    if args.report:
        check_file(Path(args.report), kind="a `fleetsim sweep` page", is_kind=_is_sweep_page,
                   inputs=inputs)
        if Path(args.report).resolve() == out.resolve():
            raise ScenarioError("the page would replace the table; name another file",
                                field="--report")
    bar, update = _bar("sweep") if not args.quiet else (None, None)
    try:
        table = sweep(scenario, varies, executor=args.executor, workers=args.workers,
                      scheduler=args.scheduler, progress=update)
    except DaskSchedulerError as exc:
        raise ScenarioError(str(exc), field="--scheduler") from None
    finally:
        if bar is not None:
            bar.stop()
    write_file(out, csv_safe(table).to_csv(index=False))
    if args.report:
        from sim.report import build_sweep_report
        write_file(Path(args.report), build_sweep_report(table, scenario.name))
    if not args.quiet:
        with_pd_options(lambda: print(table.to_string(index=False)))
        print(f"{len(table)} points -> {out}" + (f", {args.report}" if args.report else ""))
    return 0


def _is_sweep_table(path: Path) -> bool:
    """True if ``path`` starts with the header of a `fleetsim sweep` table."""
    import csv

    from sim.report import SWEEP_X, SWEEP_Y
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            header = next(csv.reader([fh.readline(65536)]), [])
    except (OSError, UnicodeDecodeError):
        return False
    return all(c in header for c in (SWEEP_X, *SWEEP_Y))


def _is_sweep_page(path: Path) -> bool:
    """True if ``path`` starts as the page `fleetsim sweep --report` writes."""
    head = "<!doctype html><html><head><meta charset='utf-8'><title>fleetsim sweep: "
    try:
        with open(path, "rb") as fh:
            return fh.read(len(head)) == head.encode()
    except OSError:
        return False


def _cmd_compare(args: argparse.Namespace) -> int:
    from sim.planning.compare import compare, load_summary

    allowed = _allowed(args)
    table = compare(load_summary(args.a, allowed), load_summary(args.b, allowed))
    with_pd_options(lambda: print(table.to_string(index=False)))
    return 0


def _cmd_drift_check(args: argparse.Namespace) -> int:
    from sim.output_paths import check_file
    from sim.planning.check import check, is_baseline

    baseline = Path(args.baseline)
    if args.update:     # before any work: never an input, never a file check did not write
        check_file(baseline, kind="a `fleetsim check` baseline", is_kind=is_baseline,
                   inputs=_inputs(args))
    code, lines = check(args.scenarios, baseline, _slos(args), args.tolerance,
                        args.update, allow_paths=_allowed(args))
    for line in lines:
        print(line)
    return code


def _tolerance(text: str) -> float:
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"cannot read {text!r} as a tolerance (5% or 0.05)") from None
    if not 0 <= value <= 10:    # NaN fails too: a gate that can never fail is no gate
        raise argparse.ArgumentTypeError(
            f"a tolerance from 0 to 1000% (5% or 0.05), got {text!r}")
    return value


def _cmd_schema(args: argparse.Namespace) -> int:
    from sim.config.scenario import Scenario
    print(json.dumps(Scenario.model_json_schema(), indent=2))
    return 0


def _cmd_lint(args: argparse.Namespace) -> int:
    import sim
    from sim.api import prepare
    for path in args.scenarios:
        # everything up to the first simulated event: data files read, arrivals drawn
        prepare(sim.load_scenario(path, allow_paths=_allowed(args)))
        print(f"{path}: ok")
    return 0


def _cmd_profiles(args: argparse.Namespace) -> int:
    from sim.paths import data_dir
    print("hardware: " + ", ".join(profiles.hardware_names()))
    print("models:   " + ", ".join(profiles.model_names()))
    gpu = data_dir("profiles") / "calibrated" / "gpu"
    found = sorted(gpu.glob("*/*/*.yaml"))
    engines = sorted({p.parent.name for p in found})
    gpus = sorted({p.parent.parent.name for p in found})
    print(f"measured: {len(found)} GPU profiles from measured kernels ({', '.join(engines)} "
          f"on {', '.join(gpus)}), under profiles/calibrated/gpu/; a pool on a matching "
          f"model, GPU, TP and dtypes uses its profile by default")
    return 0


def _cmd_calibrate_from_kernels(args: argparse.Namespace) -> int:
    """A profile built from a database of GPU kernels measured on real GPUs."""
    from calibrate import from_kernels
    from calibrate.kernel_db import GPU_FOLDERS, KernelDbError
    from calibrate.spec import load_model
    from sim.cost.measured import profile_name
    from sim.output_paths import os_error
    if args.gpu is None:
        raise ScenarioError(f"calibrate --from {args.source}: name the GPU with --gpu "
                            f"({', '.join(sorted(GPU_FOLDERS))})")
    hw = profiles.find_hardware(args.gpu)
    if hw is None:
        raise ScenarioError(f"--gpu {args.gpu}: unknown GPU; known: "
                            f"{', '.join(sorted(GPU_FOLDERS))}")
    dtype, kv_dtype = args.dtype or "bf16", args.kv_dtype or "bf16"
    args.engine = args.engine or "vllm"
    try:
        shape = load_model(args.model)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    if not from_kernels.room_for_kv(shape.name, hw.name, args.tp, dtype, kv_dtype):
        spec = profiles.find_model(shape.name)
        raise ScenarioError(
            f"{shape.name} in {dtype} ({spec.weight_bytes(dtype) / 2 ** 30:.1f} GiB of "
            f"weights) leaves no room for a KV cache on {args.tp} x {hw.name} "
            f"({hw.planning_memory / 2 ** 30:.1f} GiB each)")
    out = Path(args.out) if args.out else from_kernels.default_folder(hw.name, args.engine)
    _check_profile_files(out / profile_name(shape.name, args.tp, dtype, kv_dtype))
    try:
        profile = from_kernels.build(shape, hw.name, args.tp, args.engine, dtype, kv_dtype,
                                     hw.hbm_bandwidth, version=args.engine_version,
                                     root=args.kernel_db)
    except KernelDbError as exc:
        raise ScenarioError(str(exc)) from None
    try:
        path = from_kernels.write(profile, out)
    except OSError as exc:
        raise os_error(exc, out, started=True) from None
    if not args.quiet:
        src = profile["source"]
        print(f"{shape.name} tp={args.tp} {dtype} (KV {kv_dtype}) on {hw.name} from "
              f"{src['engine']} {src['engine_version']} kernels "
              f"(aiconfigurator-core {src['package_version']}):")
        for term, err in profile["fit_error"].items():
            if err["points"]:
                held = profile["held_back_error"][term]
                print(f"  {term:<13} {err['points']:5d} points: median {100 * err['median']:5.1f}%"
                      f" max {100 * err['max']:6.1f}%; held back: median "
                      + ("n/a" if held["median"] is None else f"{100 * held['median']:.1f}%"))
    print(f"wrote {path}")
    return 0


def is_profile(path: Path) -> bool:
    """True if ``path`` is a calibrated step-time profile (``kind:
    fleetsim-calibrated-step-time``), which `fleetsim calibrate` may replace."""
    import yaml
    try:
        with open(path, "rb") as fh:
            data = yaml.safe_load(fh.read(1 << 20))
    except (OSError, yaml.YAMLError, UnicodeError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("kind") == "fleetsim-calibrated-step-time"


def _check_profile_files(profile: Path, *siblings: str) -> None:
    """Before the work: the profile (and its sibling files with these suffixes, the
    plot and the log) may be written, replacing only what `calibrate` wrote."""
    from sim.output_paths import check_file
    check_file(profile, kind="a calibrated profile fleetsim wrote", is_kind=is_profile)
    for suffix in siblings:
        check_file(profile.with_suffix(suffix), kind="the plot or log of a calibrated profile",
                   is_kind=lambda _p: is_profile(profile))


def _cmd_calibrate(args: argparse.Namespace) -> int:
    if args.source is not None:
        return _cmd_calibrate_from_kernels(args)
    for flag, value in (("--gpu", args.gpu), ("--engine", args.engine),
                        ("--engine-version", args.engine_version),
                        ("--kv-dtype", args.kv_dtype), ("--kernel-db", args.kernel_db)):
        if value is not None:
            raise ScenarioError(f"{flag} is for profiles built from measured kernels "
                                f"(--from aiconfigurator)")
    if args.dtype == "fp8":
        raise ScenarioError("--dtype fp8: torch calibration times fp32, bf16 or fp16; fp8 "
                            "profiles come from measured kernels (--from aiconfigurator)")
    try:
        from calibrate.run import calibrate
    except ImportError as exc:
        raise ScenarioError(f"calibration needs torch ({exc}); install it with "
                            f"pip install 'fleetsim[calibrate]'") from None
    from calibrate.run import device_slug, profile_stem
    from calibrate.spec import load_model
    try:
        stem = profile_stem(load_model(args.model).name, args.tp)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    out = Path(args.out) if args.out else Path("profiles") / "calibrated" / device_slug(
        args.device)
    _check_profile_files(out / f"{stem}.yaml", ".png", ".log")
    try:
        result = calibrate(args.model, device=args.device, tp=args.tp, out=args.out,
                           quick=args.quick, dtype=args.dtype, threads=args.threads,
                           max_tokens=args.max_tokens, echo=None if args.quiet else print)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    print(f"held-back relative error ({result.yaml_path}):")
    for term, err in result.errors.items():
        if err["points"]:
            print(f"  {term:<18} median {100 * err['median']:5.1f}%   "
                  f"max {100 * err['max']:5.1f}%   ({err['points']} points)")
    print(f"calibrated in {result.elapsed_s:.0f} s; wrote {result.yaml_path}, "
          f"{result.plot_path.name if result.plot_path else 'no plot'}, {result.log_path.name}")
    return 0


def _cmd_validate_vllm(args: argparse.Namespace) -> int:
    """``validate --engine vllm``: serve on vLLM (or read recorded runs) and compare each
    step's schedule with fleetsim's."""
    if args.recalibrate or args.quick or args.replays is not None:
        raise ScenarioError("validate --engine vllm: --recalibrate, --quick and --replays "
                            "belong to the transformers engine")
    from calibrate import vllm_engine
    from calibrate.vllm_schedule import ServeLogError
    from sim.output_paths import prepare_folder
    log = (lambda _m: None) if args.quiet else print
    try:
        if args.from_logs:
            folders = vllm_engine.recorded(args.from_logs)
        else:
            plans = [vllm_engine.plan(p, tuple(_allowed(args))) for p in args.scenarios]
            python = vllm_engine.vllm_python()
    except (vllm_engine.VllmError, ServeLogError) as exc:
        raise ScenarioError(str(exc)) from None
    from sim.atomic_write import write_folder
    out = Path(args.out) if args.out else Path("results") / "validate-vllm"
    out = prepare_folder(out, force=args.force, inputs=_inputs(args))
    done: list = []

    def write(tmp: Path) -> list[Path]:     # the folder appears whole, or not at all
        if args.from_logs:
            rows = vllm_engine.compare_recorded(folders, tmp)
        else:
            rows = vllm_engine.serve_all(plans, tmp, python, log=log)
        done.append((rows, vllm_engine.write_report(rows, tmp)))
        return [p for p in tmp.rglob("*") if p.is_file()]

    try:
        write_folder(write, out, force=args.force, inputs=_inputs(args),
                     command="validate --engine vllm")
    except (vllm_engine.VllmError, ServeLogError) as exc:
        raise ScenarioError(str(exc)) from None
    except RuntimeError as exc:              # vLLM itself failed or hung
        print(f"error: the engine: {exc}", file=sys.stderr)
        return 1
    rows, report = done[0]
    print(report)
    missed = [f"{r['workload']}: {m}" for r in rows for m in vllm_engine.missed_targets(r)]
    if args.strict and missed:
        print(f"{len(missed)} figure(s) outside their target:\n  " + "\n  ".join(missed),
              file=sys.stderr)
        return 1
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    if args.engine == "vllm":
        if bool(args.scenarios) == bool(args.from_logs):
            raise ScenarioError("validate --engine vllm: give validation scenarios (to serve "
                                "them on vLLM) or --from-logs PATH (recorded runs), not both "
                                "or neither")
        return _cmd_validate_vllm(args)
    if bool(args.scenarios) == bool(args.from_logs):
        raise ScenarioError("validate: give validation scenarios (to serve them on the "
                            "engine) or --from-logs PATH (to analyse a recorded run), not "
                            "both or neither")
    if args.from_logs and (args.recalibrate or args.quick or args.replays is not None):
        raise ScenarioError("validate --from-logs: --recalibrate, --quick and --replays "
                            "shape the engine's run, which a recorded run has done already")
    try:
        if not args.from_logs:
            import transformers  # noqa: F401  (the engine; checked before anything is timed)
        from calibrate.engine_log import EngineLogError
        from calibrate.validate import ValidationError, format_table, validate, validate_logs
    except ImportError as exc:
        raise ScenarioError(f"validation needs torch and transformers ({exc}); install them "
                            f"with pip install 'fleetsim[validate]'") from None
    from sim.output_paths import prepare_folder
    out = Path(args.out) if args.out else Path("results") / (
        "validate-from-logs" if args.from_logs else "validate")
    out = prepare_folder(out, force=args.force, inputs=_inputs(args))
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
    print(f"wrote {out}/validation.{{txt,csv,json}}, {out}/ttft_cdf.png and each workload's "
          f"engine and simulated requests")
    missed = [row for row in report.rows() if row["within_target"] is False]
    if args.strict and missed:
        print(f"{len(missed)} figure(s) outside their target", file=sys.stderr)
        return 1
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad command line reported as every other error is: one line
    starting with ``error:``, the help to read named, exit code 2."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fleetsim", description="Discrete-event capacity planner for LLM serving fleets.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)

    run = sub.add_parser("run", help="simulate a scenario and write its results")
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument("--out", type=_path, help="output folder (default: results/<scenario name>, made "
                                   "safe as a folder name)")
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument("--duration", type=_duration,
                     help="override the arrival window, e.g. 600 or 10min")
    run.add_argument("--force", action="store_true",
                     help="replace an output folder an earlier fleetsim run wrote")
    run.add_argument("--quiet", action="store_true", help="print nothing but errors")
    run.add_argument("--json", action="store_true", help="print summary.json instead of tables")
    run.add_argument("--set", action="append", metavar="PATH=VALUE",
                     help="override a scenario field, e.g. pools.main.replicas=4")
    run.add_argument("--warmup", type=_duration, help="leave out requests arriving before this")
    run.add_argument("--replications", type=_count(MAX_REPLICATIONS), default=1,
                     help="run N seeds and report means with 95%% confidence intervals")
    run.add_argument("--workers", type=_count(MAX_WORKERS), default=1,
                     help="processes for replications (at most one per replication)")
    run.add_argument("--sweep", metavar="CSV",
                     help="a `fleetsim sweep` table whose throughput-against-latency curves "
                          "report.html shows")
    _add_allow_path(run)
    run.set_defaults(func=_cmd_run)

    size_p = sub.add_parser("size", help="cheapest fleet meeting SLOs, per pool")
    size_p.add_argument("scenario")
    size_p.add_argument("--slo", action="append", metavar="METRIC=VALUE",
                        help="e.g. ttft_p99=2s, tpot_p99=50ms, attainment=0.99")
    size_p.add_argument("--pool", action="append", help="only these pools")
    size_p.add_argument("--max-rate", action="store_true",
                        help="instead: the highest load the fleet as configured sustains")
    size_p.add_argument("--set", action="append", metavar="PATH=VALUE")
    size_p.add_argument("--out", type=_path, help="folder for size.csv and size.json")
    size_p.add_argument("--force", action="store_true",
                        help="replace an output folder an earlier fleetsim run wrote")
    _add_allow_path(size_p)
    size_p.set_defaults(func=_cmd_size)

    sweep_p = sub.add_parser("sweep", help="run a grid over scenario fields")
    sweep_p.add_argument("scenario")
    sweep_p.add_argument("--vary", action="append", required=True, metavar="PATH=VALUES",
                         help="e.g. pools.main.replicas=2..8:2 or workload.rate_scale=1,2,4")
    sweep_p.add_argument("--set", action="append", metavar="PATH=VALUE")
    sweep_p.add_argument("--executor", choices=["local", "dask"], default="local")
    sweep_p.add_argument("--workers", type=_count(MAX_WORKERS), default=1,
                         help="processes (or Dask workers) for the grid's points")
    sweep_p.add_argument("--scheduler", help="Dask scheduler address, e.g. tcp://host:8786")
    sweep_p.add_argument("--out", type=_path, help="CSV file for the table (default: results/<scenario "
                                       "name>-sweep.csv); replaces only an earlier sweep table")
    sweep_p.add_argument("--report", type=_path, metavar="HTML",
                         help="also write a self-contained page with the throughput-against-"
                              "latency curves")
    sweep_p.add_argument("--quiet", action="store_true")
    _add_allow_path(sweep_p)
    sweep_p.set_defaults(func=_cmd_sweep)

    cmp_p = sub.add_parser("compare", help="two scenarios or result folders side by side")
    cmp_p.add_argument("a")
    cmp_p.add_argument("b")
    _add_allow_path(cmp_p)
    cmp_p.set_defaults(func=_cmd_compare)

    check_p = sub.add_parser("check", help="fail when sizing or latency drift from a baseline")
    check_p.add_argument("scenarios", nargs="+")
    check_p.add_argument("--baseline", type=_path, required=True)
    check_p.add_argument("--slo", action="append", metavar="METRIC=VALUE")
    check_p.add_argument("--tolerance", type=_tolerance, default=0.05)
    check_p.add_argument("--update", action="store_true", help="rewrite the baseline")
    _add_allow_path(check_p)
    check_p.set_defaults(func=_cmd_drift_check)

    schema = sub.add_parser("schema", help="print the scenario JSON Schema (for editors)")
    schema.set_defaults(func=_cmd_schema)

    check = sub.add_parser("lint", help="validate scenario files and the data they read, without running them")
    check.add_argument("scenarios", nargs="+")
    _add_allow_path(check)
    check.set_defaults(func=_cmd_lint)

    prof = sub.add_parser("profiles", help="list the shipped hardware and model profiles")
    prof.set_defaults(func=_cmd_profiles)

    cal = sub.add_parser("calibrate", help="benchmark a model's layer shapes with torch and "
                                           "write a calibrated step-time profile")
    cal.add_argument("--model", required=True,
                     help="model profile name (e.g. tiny-llama) or a model YAML file")
    cal.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                     help="where to run the benchmarks (default: cpu)")
    cal.add_argument("--tp", type=_count(64), default=1,
                     help="tensor-parallel degree whose shard shapes are timed (default: 1)")
    cal.add_argument("--out", type=_path, help="output folder (default: profiles/calibrated/<device>/)")
    cal.add_argument("--quick", action="store_true",
                     help="few points and small sizes (a smoke test, not a usable profile)")
    cal.add_argument("--dtype", choices=("fp32", "bf16", "fp16", "fp8"),
                     help="compute (weight) dtype (default: fp32 on cpu, bf16 on cuda and "
                          "from measured kernels)")
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
    cal.add_argument("--threads", type=_count(MAX_WORKERS), help="CPU threads (default: 1)")
    cal.add_argument("--max-tokens", type=_count(1_048_576),
                     help="largest step in tokens (default: 2048 on cpu, 16384 on cuda)")
    cal.add_argument("--quiet", action="store_true", help="print only the held-back errors")
    cal.set_defaults(func=_cmd_calibrate)

    val = sub.add_parser("validate", help="serve validation scenarios on a real engine "
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
    val.add_argument("--out", type=_path, help="output folder (default: results/validate, or "
                                   "results/validate-vllm)")
    val.add_argument("--force", action="store_true",
                     help="replace an output folder an earlier fleetsim run wrote")
    val.add_argument("--recalibrate", action="store_true",
                     help="calibrate this machine even if a profile made on it exists")
    val.add_argument("--quick", action="store_true",
                     help="a smaller grid for the engine's step-time fit")
    val.add_argument("--replays", type=_positive_int, default=None,
                     help="times the engine serves each workload, each just after a pass "
                          "over the calibration grid (default 3)")
    val.add_argument("--strict", action="store_true",
                     help="exit 1 when a figure misses its target error")
    val.add_argument("--quiet", action="store_true", help="print only the table")
    val.set_defaults(func=_cmd_validate)
    return parser


# Commands whose only product is what they print: a reader that goes away early
# (`fleetsim schema | head`) is not a failure for them (exit 0). For the others a
# closed or full standard output is an error naming <stdout> with exit 1: the work
# ran (and its files, if any, were saved), but what it printed was lost.
_PRINT_ONLY = ("schema", "profiles", "lint", "compare")


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
    args = build_parser().parse_args(argv)
    real_stdout = sys.stdout
    if real_stdout is not None:
        sys.stdout = _Stdout(real_stdout)
    try:
        return _main(args)
    finally:
        sys.stdout = real_stdout


def _main(args: argparse.Namespace) -> int:
    try:
        code = args.func(args)
        if sys.stdout is None:
            quiet = getattr(args, "quiet", False) and args.command != "check"
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


if __name__ == "__main__":
    sys.exit(main())
