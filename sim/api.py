"""The Python API: load a scenario, run it, get DataFrames back."""
from __future__ import annotations

from pathlib import Path

import pydantic

from sim.config.resolve import Resolved, resolve
from sim.config.scenario import Scenario
from sim.errors import Problem, ScenarioError, from_validation_error
from sim.paths import resolve_scenario_path
from sim.results import Results, collect
from sim.simulation import ProgressFn, run_resolved
from sim.workload import WorkloadDataError
from sim.yamlio import LineMap, load_yaml


def _resolve_or_raise(scenario: Scenario, file: str | None, line_map: LineMap | None) -> Resolved:
    resolved, problems = resolve(scenario)
    if resolved is None:
        raise ScenarioError.many([
            Problem(msg, file=file, line=line_map.line_for(loc) if line_map else None,
                    field=".".join(str(p) for p in loc))
            for loc, msg in problems])
    return resolved


def load_scenario(path: str | Path) -> Scenario:
    """Read, validate and cross-check a scenario YAML file.

    Raises ScenarioError (file, line, field, message) on any problem.
    """
    p = resolve_scenario_path(path)
    data, line_map = load_yaml(p)
    try:
        scenario = Scenario.model_validate(data)
    except pydantic.ValidationError as exc:
        raise from_validation_error(exc, file=str(p), data=data, line_map=line_map,
                                    root_model=Scenario) from None
    scenario._source = str(p.resolve())
    _resolve_or_raise(scenario, str(p), line_map)
    _check_data_files(scenario, p, line_map)
    return scenario


def _check_data_files(scenario: Scenario, path: Path, line_map: LineMap) -> None:
    """Trace files named by the scenario exist (relative to the scenario file)."""
    problems = []
    for name, stream in scenario.workload.streams.items():
        trace = getattr(stream.arrival, "path", None)
        if trace is not None and stream.arrival.type == "trace":
            target = Path(trace) if Path(trace).is_absolute() else path.parent / trace
            if not target.is_file():
                loc = ("workload", "streams", name, "arrival", "path")
                problems.append(Problem(f"trace file {target} not found",
                                        file=str(path), line=line_map.line_for(loc),
                                        field=".".join(loc)))
    if problems:
        raise ScenarioError.many(problems)


def _base_dir(scenario: Scenario) -> Path:
    return Path(scenario._source).parent if scenario._source else Path.cwd()


def with_overrides(scenario: Scenario, *, seed: int | None = None,
                   duration_s: float | None = None) -> Scenario:
    """A copy with the run's seed or arrival window replaced (CLI flags)."""
    update = {}
    if seed is not None:
        update["seed"] = seed
    if duration_s is not None:
        update["duration"] = duration_s
    if not update:
        return scenario
    try:
        out = Scenario.model_validate({**scenario.model_dump(), **update})
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        raise ScenarioError(f"{err['msg']} (got {err.get('input')!r})",
                            field="--" + ".".join(str(p) for p in err["loc"])) from None
    out._source = scenario._source
    return out


def run(scenario: Scenario, *, progress: ProgressFn | None = None) -> Results:
    """Simulate ``scenario`` and return its tables and summary."""
    resolved = _resolve_or_raise(scenario, scenario._source, None)
    try:
        sim = run_resolved(resolved, _base_dir(scenario), progress)
    except WorkloadDataError as exc:
        raise ScenarioError(exc.message, file=str(exc.path), line=exc.line) from None
    return collect(sim)
