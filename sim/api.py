"""The Python API: load a scenario, run it, get DataFrames back."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pydantic

from sim.config.resolve import Resolved, resolve
from sim.config.scenario import Scenario
from sim.config.errors import Problem, ScenarioError, dotted_path
from sim.config.validation_errors import from_validation_error
from sim.config.inputs import (DataFiles, InputFileError, check_regular, scenario_files,
                               shown)
from sim.config.paths import resolve_scenario_path
from sim.output.results import Results, collect
from sim.core.checks import RunRefused
from sim.core.simulation import ProgressFn, Simulation, Watch
from sim.workload import WorkloadDataError
from sim.config.yamlio import LineMap, load_yaml


def _resolve_or_raise(scenario: Scenario, file: str | None, line_map: LineMap | None) -> Resolved:
    resolved, problems = resolve(scenario)
    if resolved is None:
        raise ScenarioError.many([
            Problem(msg, file=file, line=line_map.line_for(loc) if line_map else None,
                    field=dotted_path(loc))
            for loc, msg in problems])
    return resolved


def load_scenario(path: str | Path, *, allow_paths: Iterable[str | Path] = ()) -> Scenario:
    """Read, validate and cross-check a scenario YAML file.

    The data files it names must lie in its folder or fleetsim's shipped data,
    or in one of ``allow_paths`` (see :mod:`sim.config.inputs`). Raises ScenarioError
    (file, line, field, message) on any problem.
    """
    p = resolve_scenario_path(path)
    data, line_map = load_yaml(p, expected_keys=_scenario_keys())
    if isinstance(data, dict) and isinstance(data.get("models"), dict):
        data = {**data, "models": _models_from_configs(
            data["models"], p, line_map, DataFiles.for_source(p, allow_paths))}
    if isinstance(data, dict) and "$schema" in data:    # for editors: names the schema
        if not isinstance(data["$schema"], str):
            raise ScenarioError("$schema names the schema file or URL (a string)", file=str(p),
                                line=line_map.line_for(("$schema",)), field="$schema")
        data = {k: v for k, v in data.items() if k != "$schema"}
    try:
        scenario = Scenario.model_validate(data)
    except pydantic.ValidationError as exc:
        raise from_validation_error(exc, file=str(p), data=data, line_map=line_map,
                                    root_model=Scenario) from None
    scenario._source = str(p.resolve())
    scenario._allow_paths = tuple(str(Path(a).expanduser().resolve()) for a in allow_paths)
    _resolve_or_raise(scenario, str(p), line_map)
    _check_data_files(scenario, p, line_map)
    return scenario


def _models_from_configs(models: dict, path: Path, line_map: LineMap,
                         files: DataFiles) -> dict:
    """``models: {NAME: {config: PATH}}``: the model profile of a Hugging Face config.json
    (as `fleetsim import-model` writes it), named NAME; the file lies where data files
    may (the scenario's folder, the shipped data or an allowed folder)."""
    from sim.config.import_model import profile_from_config, read_config
    out = dict(models)
    for name, entry in models.items():
        if not (isinstance(entry, dict) and "config" in entry):
            continue
        loc = ("models", name, "config")
        where = {"file": str(path), "line": line_map.line_for(loc), "field": dotted_path(loc)}
        if set(entry) != {"config"} or not isinstance(entry["config"], str) \
                or not entry["config"].strip():
            raise ScenarioError("a model from a config file is {config: PATH} alone (the path "
                                "of a Hugging Face config.json); write other fields in a "
                                "profile instead", **where)
        try:
            config = files.path(entry["config"])
        except InputFileError as exc:
            raise ScenarioError(f"config file {shown(exc.path)}: {exc.message}", **where) \
                from None
        out[name] = profile_from_config(read_config(config), str(name), shown(config))
    return out


def _scenario_keys() -> list[str]:
    return [info.alias or name for name, info in Scenario.model_fields.items()]


def _length_files(loc: tuple, cfg) -> Iterator[tuple[tuple, str]]:
    """``(loc, path)`` of every length distribution read from a file under ``cfg``."""
    if getattr(cfg, "type", None) == "empirical" and getattr(cfg, "path", None) is not None:
        yield loc + ("path",), cfg.path
    for i, component in enumerate(getattr(cfg, "components", None) or ()):
        yield from _length_files(loc + ("components", i, "dist"), component.dist)


def data_files(scenario: Scenario) -> list[Path]:
    """The files a scenario reads besides itself: traces, length distributions and
    calibrated profiles (those that can be found), where they would be read from."""
    files = scenario_files(scenario)
    found: list[str] = []
    for stream in scenario.workload.streams.values():
        if stream.arrival.type == "trace":
            found.append(stream.arrival.path)
        for key in ("prompt_tokens", "output_tokens"):
            found += [text for _loc, text in _length_files((), getattr(stream, key))]
    paths = [files.locate(text) for text in found]
    from sim.cost.profile_file import resolve_profile_path
    for pool in scenario.pools.values():
        profile = pool.cost_model.profile_file()
        if profile:
            try:
                paths.append(resolve_profile_path(profile, files))
            except (ValueError, OSError):
                pass
    return paths


def _check_data_files(scenario: Scenario, path: Path, line_map: LineMap) -> None:
    """Trace and length files named by the scenario are regular files where they may be
    read from (see :mod:`sim.config.inputs`), relative to the scenario file."""
    files = scenario_files(scenario)
    named: list[tuple[tuple, str, str]] = []
    for name, stream in scenario.workload.streams.items():
        here = ("workload", "streams", name)
        if stream.arrival.type == "trace":
            named.append((here + ("arrival", "path"), stream.arrival.path, "trace file"))
        for key in ("prompt_tokens", "output_tokens"):
            named += [(loc, text, "length file")
                      for loc, text in _length_files(here + (key,), getattr(stream, key))]
    problems = []
    for loc, text, kind in named:
        try:
            check_regular(files.path(text))
        except InputFileError as exc:
            problems.append(Problem(f"{kind} {shown(exc.path)}: {exc.message}", file=str(path),
                                    line=line_map.line_for(loc), field=dotted_path(loc)))
    if problems:
        raise ScenarioError.many(problems)


def with_overrides(scenario: Scenario, set: Mapping[str, Any] | None = None, *,
                   seed: int | None = None, duration_s: float | None = None,
                   **fields: Any) -> Scenario:
    """A copy of ``scenario`` with fields replaced, checked as the file was.

    ``seed`` and ``duration_s`` replace the run's seed and arrival window (the CLI's
    ``--seed`` and ``--duration``). ``set`` (or keywords, ``**{"pools.main.replicas": 3}``)
    maps dotted paths of the scenario's YAML keys to values, as ``fleetsim run --set
    PATH=VALUE`` does: ``{"pools.main.replicas": 3, "workload.streams.chat.arrival.rate":
    "4/s"}``. A value is what the file would hold (units as text: ``"4/s"``, ``"2s"``; a
    block as a dict). A path that is not the scenario's, or a value its field refuses, is
    a :class:`ScenarioError` naming the dotted field and the valid choices (a typo gets a
    did-you-mean), and the whole scenario's checks run again (names that exist, pools
    that fit), as for ``--set``.
    """
    update = {}
    if seed is not None:
        update["seed"] = seed
    if duration_s is not None:
        update["duration"] = duration_s
    if update:
        try:
            out = Scenario.model_validate({**scenario.model_dump(), **update})
        except pydantic.ValidationError as exc:
            err = exc.errors()[0]
            raise ScenarioError(f"{err['msg']} (got {err.get('input')!r})",
                                field="--" + ".".join(str(p) for p in err["loc"])) from None
        out._source, out._allow_paths = scenario._source, scenario._allow_paths
        out._flags = dict(scenario._flags)
        scenario = out
    dotted = _dotted(set, fields, given=update)
    return _with_dotted(scenario, dotted) if dotted else scenario


# how a run's refusal names a field given by :func:`with_overrides` (the CLI names its flag)
OVERRIDES = "sim.with_overrides"


def _dotted(given_set: Mapping[str, Any] | None, fields: dict[str, Any],
            given: dict[str, Any]) -> dict[str, Any]:
    """The dotted overrides of ``set`` and the keywords, each path once, none inside
    another, none also given as ``seed=`` or ``duration_s=``."""
    from sim.planning.overrides import nested_in
    if given_set is not None and not isinstance(given_set, Mapping):
        raise ScenarioError(f"set= takes a mapping of dotted paths to values, e.g. "
                            f"{{'pools.main.replicas': 3}}, not a {type(given_set).__name__}",
                            field="set")
    dotted: dict[str, Any] = {}
    keyword = {"seed": "seed=", "duration": "duration_s="}
    for path, value in [*(given_set or {}).items(), *fields.items()]:
        if not isinstance(path, str) or not path.strip(".").strip():
            raise ScenarioError(f"{path!r}: a field is a dotted path of the scenario's "
                                "keys, e.g. 'pools.main.replicas'", field="set")
        if path in dotted:
            raise ScenarioError("given twice (in set= and as a keyword); give it once",
                                field=path)
        if path in given:
            raise ScenarioError(f"given as {keyword[path]} and as a dotted field; give "
                                "one", field=path)
        inner = nested_in(path, dotted)
        if inner is not None:
            raise ScenarioError(f"{path} and {inner}: one holds the other, and the outer "
                                "value would replace the inner; give one", field=path)
        dotted[path] = value
    return dotted


def _with_dotted(scenario: Scenario, dotted: dict[str, Any]) -> Scenario:
    """:func:`sim.planning.overrides.with_values` (what ``--set`` runs), then the whole
    scenario's checks; a problem on a field the overrides did not give says they made
    it."""
    from sim.planning.overrides import with_values
    try:
        out = cross_check(with_values(scenario, dotted))
    except ScenarioError as exc:
        raise ScenarioError.many([
            p if given_by(dict.fromkeys(dotted, OVERRIDES), p.field or "") is not None
            else Problem(f"with the overrides {', '.join(dotted)}: {p.message}",
                         field=p.field)
            for p in exc.problems]) from None
    out._flags = {**scenario._flags, **dict.fromkeys(dotted, OVERRIDES)}
    return out


def cross_check(scenario: Scenario) -> Scenario:
    """The checks :func:`load_scenario` makes beyond types and ranges (names that exist,
    pools that fit, sense across fields), for a scenario changed since it was read (an
    override); ScenarioError names the fields at fault."""
    _resolve_or_raise(scenario, None, None)
    return scenario


def prepare(scenario: Scenario) -> Simulation:
    """Everything a run does before its first event (resolve the fleet, read the data
    files, generate the arrivals, build the pools) and its checks; raises ScenarioError
    on any problem. ``fleetsim lint`` stops here."""
    resolved = _resolve_or_raise(scenario, scenario._source, None)
    try:
        return Simulation(resolved, scenario_files(scenario))
    except WorkloadDataError as exc:
        raise ScenarioError(exc.message, file=shown(exc.path), line=exc.line) from None
    except RunRefused as exc:
        raise refused(scenario, exc) from None


def run(scenario: Scenario, *, progress: ProgressFn | None = None,
        watch: Watch | None = None, notice: Callable[[str], None] | None = None) -> Results:
    """Simulate ``scenario`` and return its tables and summary (``watch``: a test asked
    every so often that may end the run early, see :meth:`Simulation.run`; ``notice``: told
    a long run's estimated cost before it starts, see :mod:`sim.core.work`)."""
    t0 = time.perf_counter()
    simulation = prepare(scenario)
    if notice is not None and simulation.work_notice is not None:
        notice(simulation.work_notice)
    setup_s = time.perf_counter() - t0
    try:
        simulation.run(progress, watch)
    except RunRefused as exc:           # found while running (an open-ended stream)
        raise refused(scenario, exc) from None
    simulation.wall_s = time.perf_counter() - t0
    simulation.setup_s = setup_s
    return collect(simulation.account())


def write_results(results: Results, folder: str | Path, *, force: bool = False,
                  report: bool = True, requests: bool = True, csv: bool = False
                  ) -> list[Path]:
    """:meth:`Results.write`: the files ``fleetsim run --out folder`` writes, by its writer
    (:func:`sim.output.outputs.write_outputs`) and under its rules: an existing non-empty
    ``folder`` is replaced only with ``force`` and only if fleetsim wrote it, never one
    holding the scenario or a data file it read."""
    from sim.output.outputs import write_outputs
    scenario = results.scenario
    inputs = [str(p) for p in data_files(scenario)]
    if scenario._source is not None:
        inputs.append(scenario._source)
    return write_outputs(results, Path(folder), force=force, inputs=inputs, report=report,
                         requests=requests, csv=csv)


def refused(scenario: Scenario, exc: RunRefused) -> ScenarioError:
    """A run refused at ``exc.loc``: located in the scenario's file, or, where that field
    came from the command line, named with its flag."""
    flag = given_by(scenario._flags, dotted_path(exc.loc))
    return ScenarioError(exc.message if flag is None else f"with {flag}: {exc.message}",
                         **located(scenario, exc.loc))


def given_by(flags: dict[str, str], field: str) -> str | None:
    """The command-line flag (of ``flags``, a scenario's ``_flags``) that gave ``field`` or
    a block holding it, if one did."""
    return next((flag for path, flag in flags.items()
                 if field == path or field.startswith((path + ".", path + "["))), None)


def located(scenario: Scenario, loc: tuple) -> dict:
    """file, line and field of ``loc`` in the scenario's own file (when it has one, and
    the field's value is the file's, not a flag's)."""
    where: dict = {"field": dotted_path(loc)}
    if scenario._source is not None and given_by(scenario._flags, where["field"]) is None:
        source = Path(scenario._source)
        if source.is_relative_to(Path.cwd()):
            source = source.relative_to(Path.cwd())
        where["file"] = shown(source)
        try:
            where["line"] = load_yaml(Path(scenario._source))[1].line_for(loc)
        except ScenarioError:        # the file changed since it was read
            pass
    return where
