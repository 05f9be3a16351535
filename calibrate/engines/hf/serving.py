"""Serving the workloads on the real engine, or reading a recorded run, and analysing each."""
from __future__ import annotations

import copy
import csv
import json
import os
import platform
import shutil
import time
from pathlib import Path

import yaml

from calibrate.engines.step_fit import (continuous_steps, fit_continuous, fit_sequential,
                                  sequential_steps)
from calibrate.engines.hf.engine_log import EngineLog, EngineLogError, find_logs
from calibrate.engines.hf.engine_log import FILE_NAME as LOG_NAME
from calibrate.engines.records import EngineRecord, EngineRequest
from calibrate.engines.hf.comparison import compare_workload
from calibrate.engines.hf.profiles import write_fit_steps, base_profile, engine_profile
from calibrate.engines.hf.report import ValidationReport, write_report
from calibrate.engines.hf.workload import (ValidationError, Workload, check_workloads,
                                         safe_name, draw_requests, load_workload)
from calibrate.fitting.profile_file import write_profile
from sim.config.errors import ScenarioError
from sim.output.files.outputs import write_folder

# the engines, the calibration and the host's name need torch: imported where they run,
# so that a recorded run is analysed without it


def serve(w: Workload, engine, requests: list[EngineRequest], log, replay: int, replays: int
          ) -> tuple[list[EngineRecord], list]:
    """One replay of the workload on the engine: its request records and step log."""
    log(f"{w.scenario.name}: replay {replay + 1}/{replays}, {len(requests)} requests over "
        f"{requests[-1].arrival_s:.0f} s on the engine ({w.kind})")
    records = engine.run(requests)
    return records, list(getattr(engine, "steps", []) or [])


def _key(w: Workload) -> str:
    if w.kind == "single":
        return "generate"
    lim = w.limits
    return (f"cb-{lim.max_batch_tokens}-{lim.max_requests_per_batch}-{lim.page_size}-"
            f"{lim.num_blocks}")


def _validate_into(workloads: list[Workload], out_dir: Path, recalibrate: bool,
                   quick_fit: bool, replays: int, log) -> ValidationReport:
    """Each workload is served ``replays`` times by one warm engine, each replay just after
    a pass over the calibration grid on that engine; the engine terms are fitted once on
    every pass. This machine's speed drifts by several percent within a minute: calibration
    spread over the same minutes as the replays sees the same drift on average, where one
    pass before one replay can catch the machine fast and serve the workload slow."""
    from calibrate.microbench import timing
    from calibrate.engines.hf.engine import ContinuousEngine, SequentialEngine, transformers_version
    profile_path, profile = base_profile(workloads[0], out_dir, recalibrate, log)
    threads = int(profile.get("threads") or 1)
    engines: dict[str, object] = {}
    analysed = []
    try:
        for w in workloads:
            requests = draw_requests(w)
            if not requests:
                raise ValidationError(f"{w.path}: the workload has no requests")
            key = _key(w)
            if key not in engines:
                engines[key] = (SequentialEngine(w.shape, threads=threads)
                                if w.kind == "single"
                                else ContinuousEngine(w.shape, w.limits, threads=threads))
                getattr(engines[key], "start", lambda: None)()
            engine = engines[key]
            calibration: list = []
            served = []
            wall_s = 0.0
            for replay in range(replays):
                first = 1 + max((g for g, _ in calibration), default=-1)
                calibration += (sequential_steps(engine, w.shape, quick_fit, first)
                                if w.kind == "single" else
                                continuous_steps(engine, w.limits, quick_fit, first))
                t0 = time.perf_counter()
                served.append(serve(w, engine, requests, log, replay, replays))
                wall_s += time.perf_counter() - t0
            elog = EngineLog(
                workload=w.scenario.name, kind=w.kind, engine=engine.name, limits=w.limits,
                scenario=w.raw, profile=profile, calibration=calibration, replays=served,
                meta={"host": timing.device_name("cpu"),
                      "transformers_version": transformers_version(),
                      "python": platform.python_version(), "engine_wall_s": wall_s,
                      "quick_fit": quick_fit, "profile_file": profile_path.name})
            (out_dir / w.scenario.name).mkdir(parents=True, exist_ok=True)
            elog.write(out_dir / w.scenario.name / LOG_NAME)
            analysed.append(_analyse(w, elog, out_dir, log))
    finally:
        for engine in engines.values():
            getattr(engine, "stop", lambda: None)()
    return _report(analysed, profile_path, out_dir)


def _analyse(w: Workload, elog: EngineLog, out_dir: Path, log):
    """The engine terms fitted on the log's calibration steps and the log's replays against
    fleetsim's prediction: the part of a validation that needs no engine."""
    profile = elog.profile
    fit = (fit_sequential(profile, elog.calibration, log) if w.kind == "single"
           else fit_continuous(profile, w.limits, elog.calibration, log))
    name = w.scenario.name
    folder = out_dir / "profile"
    write_fit_steps(profile, fit, folder / f"{name}-engine-steps.csv")
    path = folder / f"{name}-engine.yaml"
    data = engine_profile(profile, fit, elog.engine, elog.meta.get("transformers_version"),
                          w.limits, path)
    result = compare_workload(w, elog.replays, path, data, out_dir,
                              float(elog.meta.get("engine_wall_s", float("nan"))), log)
    return result, fit, path, elog.meta


def _report(analysed: list, profile_path: Path, out_dir: Path) -> ValidationReport:
    metas = [m for *_, m in analysed]
    report = ValidationReport([r for r, *_ in analysed], profile_path,
                              {r.name: p for r, _, p, _ in analysed},
                              {r.name: f for r, f, _, _ in analysed}, out_dir,
                              host=metas[0].get("host"),
                              engine_version=metas[0].get("transformers_version"))
    write_report(report)
    return report


def _built_in(out_dir: Path, force: bool, build) -> ValidationReport:
    """``build(tmp)`` writes a report into a temporary folder renamed to ``out_dir`` when
    complete (an existing folder is replaced only with ``force``); paths in the report
    are moved along."""
    built: list[ValidationReport] = []

    def write(tmp: Path) -> list[Path]:
        built.append(build(tmp))
        return [p for p in tmp.rglob("*") if p.is_file()]

    write_folder(write, out_dir, force=force)
    report = built[0]
    tmp = report.out_dir

    def moved(p: Path) -> Path:
        try:
            return out_dir / Path(p).relative_to(tmp)
        except ValueError:
            return Path(p)

    report.out_dir = out_dir
    report.profile_path = moved(report.profile_path)
    report.engine_profiles = {k: moved(v) for k, v in report.engine_profiles.items()}
    return report


def validate(paths: list[str | Path], out_dir: str | Path, *, force: bool = False,
             recalibrate: bool = False, quick_fit: bool = False, replays: int = 3,
             log=print) -> ValidationReport:
    """Validate every scenario in ``paths``; results are written to ``out_dir``, which
    appears complete or not at all (an existing folder is replaced only with ``force``)."""
    out_dir = Path(out_dir)
    if replays < 1:
        raise ValidationError(f"replays: at least 1, got {replays}")
    workloads = [load_workload(p) for p in paths]
    check_workloads(workloads)
    profiles_named = {w.scenario.pools[w.pool_name].cost_model.profile for w in workloads}
    if len(profiles_named) != 1:
        raise ValidationError(f"every validation scenario must name the same calibrated "
                              f"profile, got {', '.join(sorted(profiles_named))}")
    return _built_in(out_dir, force, lambda tmp: _validate_into(
        workloads, tmp, recalibrate, quick_fit, replays, log))


def _logged_workload(elog: EngineLog, where: Path, profile_path: Path, work: Path) -> Workload:
    """The log's validation scenario, written into ``work`` with its pool on the log's
    profile (and, were its arrivals a trace, the recorded requests as that trace)."""
    raw = copy.deepcopy(elog.scenario)
    try:
        (pool_name, pool), = raw["pools"].items()
        (_, stream), = raw["workload"]["streams"].items()
        pool["cost_model"] = {"type": "calibrated",
                              "profile": os.path.relpath(profile_path, work)}
        if isinstance(stream.get("arrival"), dict) and stream["arrival"].get("type") == "trace":
            with open(work / "recorded-requests.csv", "w", newline="", encoding="utf-8") as fh:
                out = csv.writer(fh)
                out.writerow(["timestamp", "prompt_tokens", "output_tokens"])
                for r in sorted(elog.replays[0][0], key=lambda r: r.arrival_s):
                    out.writerow([f"{r.arrival_s:.6f}", r.prompt_tokens, r.output_tokens])
            stream["arrival"] = {"type": "trace", "path": "recorded-requests.csv"}
    except (AttributeError, KeyError, TypeError, ValueError):
        raise EngineLogError(f"{where}: scenario: not a validation scenario (one stream, one "
                             f"pool)") from None
    path = work / "scenario-recorded.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    try:
        w = load_workload(path, allow_paths=(profile_path.parent,))
    except ScenarioError as exc:
        raise _in_log(where, exc) from None
    except ValidationError as exc:      # (it names the copy in the output's temporary folder)
        raise EngineLogError(f"{where}: scenario: {str(exc).removeprefix(f'{path}: ')}") \
            from None
    if w.kind != elog.kind or w.limits != elog.limits:
        raise EngineLogError(f"{where}: the engine's kind and limits ({elog.kind}, "
                             f"{elog.limits}) differ from its scenario's ({w.kind}, "
                             f"{w.limits})")
    if w.scenario.name != elog.workload:
        raise EngineLogError(f"{where}: workload: the log names {elog.workload!r}, its "
                             f"scenario {w.scenario.name!r}")
    return w


def _in_log(where: Path, exc) -> EngineLogError:
    """A ScenarioError about the log's scenario, as written into the output's temporary
    folder, named in the log's own terms: ``LOG: scenario.FIELD: message``."""
    return EngineLogError("\n".join(
        f"{where}: scenario{'.' + p.field if p.field else ''}: {p.message}"
        for p in exc.problems))


def validate_logs(paths: list[str | Path], out_dir: str | Path, *, force: bool = False,
                  log=print) -> ValidationReport:
    """The fit and the comparison of ``fleetsim validate``, redone on recorded engine logs
    (files, or folders ``fleetsim validate`` wrote) with the simulator as it is now; written
    to ``out_dir`` as ``validate`` writes. No engine runs and nothing is timed."""
    out_dir = Path(out_dir)
    files = find_logs(paths)
    logs = [EngineLog.read(p) for p in files]
    if len({json.dumps(g.profile, sort_keys=True) for g in logs}) != 1:
        raise ValidationError("the logs were fitted against different calibrated profiles; "
                              "analyse them one profile at a time")
    names = [g.workload for g in logs]
    if len(set(names)) != len(names):
        raise ValidationError(f"engine logs of distinct workloads are needed, got {names}")

    def build(tmp: Path) -> ValidationReport:
        folder = tmp / "profile"
        folder.mkdir(parents=True, exist_ok=True)
        profile_path = folder / safe_name(logs[0].meta.get("profile_file", ""),
                                           "profile.yaml")
        write_profile(logs[0].profile, profile_path)
        workloads = []
        for where, elog in zip(files, logs):
            work = tmp / elog.workload
            work.mkdir(parents=True, exist_ok=True)
            workloads.append(_logged_workload(elog, where, profile_path, work))
            shutil.copyfile(where, work / LOG_NAME)        # the folder can be analysed again
        check_workloads(workloads)
        analysed = []
        for where, elog, w in zip(files, logs, workloads):
            log(f"{elog.workload}: recorded run ({len(elog.replays)} replays, "
                f"{len({g for g, _ in elog.calibration})} calibration runs) from {where}")
            try:
                analysed.append(_analyse(w, elog, tmp, log))
            except ScenarioError as exc:        # (a run the scenario refuses)
                raise _in_log(where, exc) from None
        return _report(analysed, profile_path, tmp)

    for name in names:
        if safe_name(name, "") != name:
            raise ValidationError(f"workload name {name!r}: letters, digits, '.', '_' and '-' "
                                  f"only (it names a folder)")
    return _built_in(out_dir, force, build)
