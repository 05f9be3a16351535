"""``path=value`` overrides of scenario fields (``--vary``, ``--set``).

A path walks the scenario's YAML keys (``pools.large.replicas``,
``workload.rate_scale``, ``workload.streams.chat.arrival.rate``). Values are
parsed as YAML scalars, so ``4``, ``1.5``, ``true`` and ``"2s"`` mean what
they would in the file. A ``--vary`` spec is a list (``10,20,40``) or an
integer range ``start..stop:step`` (inclusive).
"""
from __future__ import annotations

import copy
import difflib
import json
import types
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Union, get_args, get_origin

import pydantic
import yaml

from sim.config.scenario import Scenario
from sim.config.errors import Problem, ScenarioError, short_repr
from sim.config.validation_errors import from_validation_error
from sim.config.yamlio import LineMap, SafeLineLoader


# scenarios one sweep may run: each is a whole simulation
MAX_GRID_POINTS = 10_000


def parse_value(text: str, flag: str = "--set") -> Any:
    """A value as a scenario file would read it (YAML 1.2 scalars: ``on`` is a string)."""
    from sim.config.yamlio import MAX_DEPTH, depth_of
    try:
        # an alias repeats a value without writing it: a short --set could expand to
        # millions (a YAML alias bomb), so a value on the command line has none
        if any(isinstance(event, yaml.AliasEvent)
               for event in yaml.parse(text, Loader=SafeLineLoader)):
            raise ScenarioError("a value on the command line cannot hold YAML aliases "
                                "(*name): write it out", field=flag)
        value = yaml.load(text, Loader=SafeLineLoader)
    except yaml.YAMLError:
        return text
    except RecursionError:
        value = None
        depth = MAX_DEPTH + 1
    else:
        depth = depth_of(value)
    if depth > MAX_DEPTH:
        raise ScenarioError(f"a value nested more than {MAX_DEPTH} levels deep",
                            field=flag)
    return value


def parse_vary(spec: str) -> tuple[str, list[Any]]:
    """``pools.p.replicas=4..32:4`` -> (``pools.p.replicas``, [4, 8, ..., 32])."""
    if "=" not in spec:
        raise ScenarioError(f"--vary {spec!r}: write PATH=VALUES, e.g. pools.main.replicas=2..8:2",
                            field="--vary")
    path, values = spec.split("=", 1)
    if not path.strip():
        raise ScenarioError(f"--vary {spec!r}: no field before '='; write PATH=VALUES, e.g. "
                            "pools.main.replicas=2..8:2", field="--vary")
    if ".." in values and values.lstrip()[:1] not in ("[", "{"):   # (not a path in a block)
        head, _, step = values.partition(":")
        start, _, stop = head.partition("..")
        try:
            lo, hi, inc = int(start), int(stop), int(step or 1)
        except ValueError:
            raise ScenarioError(f"--vary {spec!r}: a range is START..STOP[:STEP] in integers",
                                field="--vary") from None
        if inc <= 0 or hi < lo:
            raise ScenarioError(f"--vary {spec!r}: the range is empty", field="--vary")
        points = range(lo, hi + 1, inc)
        if (hi - lo) // inc + 1 > MAX_GRID_POINTS:      # len() fails past 2**63 values
            raise ScenarioError(f"--vary {spec!r}: {(hi - lo) // inc + 1:,} values; a sweep runs at "
                                f"most {MAX_GRID_POINTS:,} scenarios: widen the step",
                                field="--vary")
        return path, list(points)
    items = split_values(values)
    if not values.strip() or any(v.strip() == "" for v in items):
        what = "no values" if not values.strip() else "an empty value between commas"
        raise ScenarioError(f"--vary {spec!r}: {what}; write PATH=V1,V2,... or "
                            "PATH=START..STOP[:STEP]", field="--vary")
    listed = [parse_value(v, "--vary") for v in items]
    return path, listed


def split_values(values: str) -> list[str]:
    """``values`` cut at the commas between values: those inside a flow mapping or list
    (``{type: fixed, replicas: 2}``, ``[1, 2]``) or a quoted string belong to its value."""
    items, start, depth, quote = [], 0, 0, None
    for i, ch in enumerate(values):
        if quote is not None:
            quote = None if ch == quote else quote
        elif ch in "'\"" and values[start:i].rstrip()[-1:] in ("", "[", "{", ",", ":"):
            quote = ch          # (a quote that opens a string, not the one in it's)
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            items.append(values[start:i])
            start = i + 1
    return items + [values[start:]]


def nested_in(path: str, others: Iterable[str]) -> str | None:
    """One of ``others`` that holds ``path`` or lies inside it (``pools.main`` and
    ``pools.main.replicas``): giving both, one would silently undo the other."""
    return next((o for o in others if o != path and (o.startswith(path + ".")
                                                      or path.startswith(o + "."))), None)


def refuse_clash(flag: str, path: str, given_flag: str, given: Iterable[str],
                 twice_hint: str = "give each field one value") -> None:
    """Refuse ``flag path`` when ``given_flag`` already gave ``path``, or a field that holds
    it or lies inside it (one value would silently replace the other)."""
    if path in given:
        raise ScenarioError(f"{flag} {path}: given twice; {twice_hint}" if flag == given_flag
                            else f"{flag} {path} and {given_flag} {path} both give it; give one",
                            field=flag)
    inner = nested_in(path, given)
    if inner is not None:
        raise ScenarioError(f"{flag} {path} and {given_flag} {inner}: one holds the other, and "
                            "the outer value would replace the inner; give one", field=flag)


def check_grid(varies: list[tuple[str, list[Any]]], fixed: Iterable[str] = ()) -> None:
    """The whole grid (every combination of the --vary values) within MAX_GRID_POINTS,
    each field varied once, with distinct values, and not also fixed (``--set``)."""
    seen = set()
    fixed = set(fixed)
    for path, values in varies:
        refuse_clash("--vary", path, "--vary", seen, "list all its values in one --vary")
        refuse_clash("--vary", path, "--set", fixed)
        keys = [json.dumps(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
                           else v, sort_keys=True) for v in values]
        twice = next((v for v, k in zip(values, keys) if keys.count(k) > 1), None)
        if twice is not None:
            raise ScenarioError(f"--vary {path}: the value {twice!r} is listed more than "
                                "once (the sweep would run the same scenario twice)",
                                field="--vary")
        seen.add(path)
    size = 1
    for _, values in varies:
        size *= len(values)
    if size > MAX_GRID_POINTS:
        raise ScenarioError(f"the --vary values make {size:,} scenarios; a sweep runs at most "
                            f"{MAX_GRID_POINTS:,}: vary fewer fields or fewer values",
                            field="--vary")


# fields that change no result: a sweep over them would run one scenario many times
NOT_VARIED = {"name": "the name labels the results", "description": "a description is text",
              "record_steps": "recording steps writes steps.parquet",
              "max_requests": "a bound on the run's size",
              "sample_interval": "the time series' period"}


def check_distinct(scenario: Scenario, varies: list[tuple[str, list[Any]]]) -> None:
    """Each varied field's values as the scenario reads them (10, 10s and 10000ms are one
    duration; 4/s and 240/min one rate): none twice, and no field that changes no
    result."""
    for path, values in varies:
        if path in NOT_VARIED:
            raise ScenarioError(f"--vary {path}: {NOT_VARIED[path]} and changes no result; "
                                "every point would be the same run", field="--vary")
        seen: dict[str, Any] = {}
        for value in values:
            read = with_varied(scenario, {path: value}).model_dump(mode="json")
            for key in split_path(read, path):
                read = read.get(key) if isinstance(read, dict) else None
            key = json.dumps(read, sort_keys=True)
            if key in seen:
                raise ScenarioError(f"--vary {path}: {value!r} and {seen[key]!r} are the same "
                                    "value (the sweep would run the same scenario twice)",
                                    field="--vary")
            seen[key] = value


def with_varied(scenario: Scenario, point: dict[str, Any],
                check: Callable[[Scenario], Scenario] | None = None) -> Scenario:
    """:func:`with_values` for one point of a sweep, then ``check`` (the whole scenario's
    checks, such as :func:`sim.api.cross_check`: names that exist, pools that fit) where
    given; an error names the --vary values at fault."""
    try:
        out = with_values(scenario, point)
        return check(out) if check is not None else out
    except ScenarioError as exc:
        given = ", ".join(f"{path}={short_repr(value)}" for path, value in point.items())
        raise ScenarioError.many([Problem(f"with --vary {given}: {p.message}", field=p.field)
                                  for p in exc.problems]) from None


def split_path(data: Any, path: str) -> list[str]:
    """``path``'s keys as ``data`` has them: a key may itself hold dots (a pool named
    ``a.b``: ``pools.a.b.replicas`` is pools, a.b, replicas); where no key matches, the
    rest splits at every dot."""
    parts, keys, node = path.split("."), [], data
    i = 0
    while i < len(parts):
        for j in range(len(parts), i, -1):
            key = ".".join(parts[i:j])
            if isinstance(node, dict) and key in node:
                break
        else:
            key, j = parts[i], i + 1
        keys.append(key)
        node = node.get(key) if isinstance(node, dict) else None
        i = j
    return keys


def apply(data: dict, path: str, value: Any) -> dict:
    """A copy of scenario ``data`` with ``path`` set; the path must exist
    (a typo is an error naming the valid keys), except the last key of a
    block that the schema allows (it is then added)."""
    out = copy.deepcopy(data)
    node = out
    keys = split_path(out, path)
    for depth, key in enumerate(keys[:-1]):
        if node is None and depth:
            raise _unset(keys[:depth], path)
        if not isinstance(node, dict) or key not in node:
            valid = sorted(node) if isinstance(node, dict) else []
            where = ".".join(keys[:depth]) or "top level"
            if isinstance(node, dict) and not valid:
                raise ScenarioError(f"no '{key}' in {where}, which holds none: add it whole "
                                    f"({'.'.join(keys[:depth + 1])}={{...}})", field=path)
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ScenarioError(f"no field '{key}' at {where}; valid: "
                                f"{', '.join(map(str, valid))}{hint}", field=path)
        node = node[key]
    if node is None:
        raise _unset(keys[:-1], path)
    if not isinstance(node, dict):
        raise ScenarioError(f"'{'.'.join(keys[:-1])}' is not a mapping", field=path)
    node[keys[-1]] = value
    return out


def _unset(keys: list[str], path: str) -> ScenarioError:
    """A field inside a block the scenario leaves out: the block is set whole, and these
    are its keys (or, for a block of several types, its types)."""
    block = ".".join(keys)
    annotation = _plain(_block_type(keys))
    arms = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) \
        else (annotation,)
    models = [a for a in arms if isinstance(a, type) and issubclass(a, pydantic.BaseModel)]
    if len(models) > 1 and all("type" in m.model_fields for m in models):
        choices = "type: " + ", ".join(t for m in models
                                       for t in get_args(m.model_fields["type"].annotation))
    elif len(models) == 1:
        choices = "keys: " + ", ".join(models[0].model_fields)
    else:
        choices = ""
    return ScenarioError(f"{block} is not set in the scenario: set the block whole "
                         f"({block}={{...}})" + (f"; {choices}" if choices else ""), field=path)


def _block_type(keys: list[str]):
    """The type annotation of the block at ``keys`` below a Scenario (None when the path
    leaves the models: a free-form mapping)."""
    annotation: Any = Scenario
    for key in keys:
        annotation = _plain(annotation)
        if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
            field = annotation.model_fields.get(key)
            if field is None:
                return None
            annotation = field.annotation
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
        else:
            return None
    return annotation


def _plain(annotation):
    """Without Annotated's metadata, and an optional block as the block."""
    while True:
        if get_origin(annotation) is Annotated:
            annotation = get_args(annotation)[0]
        elif get_origin(annotation) in (Union, types.UnionType) and \
                type(None) in get_args(annotation):
            arms = [a for a in get_args(annotation) if a is not type(None)]
            if len(arms) != 1:
                return annotation
            annotation = arms[0]
        else:
            return annotation


def _retyped(data: dict, path: str, value: Any) -> dict:
    """For ``PATH.type=NEW`` on a block of another type: the block without the settings
    its old type filled in by default (they would be unknown keys of the new type); the
    settings that differ from them stay, as the user's."""
    keys = split_path(data, path)
    node = data
    for key in keys[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, dict) or node.get("type") in (None, value):
        return data
    try:
        defaults = pydantic.TypeAdapter(_block_type(keys[:-1])).validate_python(
            {"type": node["type"]}).model_dump(mode="json")
    except (pydantic.ValidationError, pydantic.PydanticSchemaGenerationError, TypeError,
            AttributeError):
        return data
    kept = {k: v for k, v in node.items() if k == "type" or defaults.get(k, object()) != v}
    out = copy.deepcopy(data)
    parent = out
    for key in keys[:-2]:
        parent = parent[key]
    parent[keys[-2]] = kept
    return out


def with_values(scenario: Scenario, assignments: dict[str, Any]) -> Scenario:
    """The scenario with every ``path: value`` applied, validated again."""
    data = scenario.model_dump(mode="json")
    for path, value in assignments.items():
        if path.endswith(".type") and path.count(".") >= 1:
            data = _retyped(data, path, value)
        data = apply(data, path, value)
    try:
        out = Scenario.model_validate(data)
    except pydantic.ValidationError as exc:  # the field at fault, with the valid choices
        raise from_validation_error(exc, file=None, line_map=LineMap(), root_model=Scenario,
                                    data=data) from None
    out._source, out._allow_paths = scenario._source, scenario._allow_paths
    out._flags = dict(scenario._flags)
    return out
