"""fleetsim against published results of real engines on real GPUs.

``scenarios/validate/gpu/published.yaml`` lists published end-to-end results (MLPerf
Inference, engines' own benchmark pages), each with its source, its setting in words and
the fleetsim scenario that writes that setting down (same model, GPU, TP, dtypes, engine
limits, lengths and load). This runs every scenario, reads the same figures from the
simulated requests as the publication defines them, and reports the relative error of
each: (predicted - published) / published, so a negative error is an optimistic latency
or a pessimistic throughput.

Nothing here is fitted: the cost model comes from kernels (or the datasheet), and these
figures only check it.

    python -m calibrate validate-gpu [--cost-model scenario|auto|roofline ...] [--out DIR]
                                     [--only ROW ...] [--strict]
    python -m calibrate validate-gpu --before-checkout WORKTREE --out DIR   # 'before'

The second form runs the Poisson rows on an earlier fleetsim (a worktree of its commit:
``python -m calibrate`` imports no part of the simulator before the command runs, so the
earlier ``sim`` is the one imported).

Figures, from the requests table:
- ``output_tokens_per_s``: for a ``server`` row (Poisson arrivals at a fixed rate), the
  output tokens of the requests that arrived after the warm-up and before the end of the
  arrival window, over the time from the warm-up's end to the last of them finishing
  (MLPerf's Server throughput: the offered load when the engine keeps up, less when it
  falls behind); for an ``offline`` row (every request at
  once) and a ``closed`` one (clients at fixed concurrency), all output tokens over the
  time from the first arrival to the last finish;
- ``ttft_*_ms`` and ``tpot_*_ms``: percentiles over the requests that arrived after the
  warm-up; TPOT is (finish - first token) / (output tokens - 1), as MLPerf and vLLM's
  benchmark define it.

Targets (the issue's): the median |error| of the throughput figures within 10%; of TTFT
and of TPOT within 20%, counting p50 on low-load rows and p99 on high-load rows, over the
rows below saturation. A row marked ``saturated`` (an MLPerf Server or Interactive result,
at the edge of what the engine sustains, where latency is ill-conditioned) is counted
apart, by capacity (:mod:`calibrate.validate.capacity`): whether the simulated fleet meets the
row's latency bounds at the published rate, and its capacity ratio (largest rate within
them / published rate), each within [1.0, 1.15] as the target; its latencies are compared
at the simulated capacity, never at the published rate. ``--before-checkout`` runs no
capacity search.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from calibrate.validate.tables import headline, markdown

FIGURES = ("output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms")
KINDS = ("server", "offline", "closed")
LOADS = ("low", "high")
class TableError(ValueError):
    """The published table is malformed (named, with the row and field)."""


# the latency figures a saturated row's bounds may hold (each a p50 or p99 the table
# publishes, so the bound that binds can be read on the published side too)
BOUNDS = tuple(f[:-3] for f in FIGURES if f.endswith("_ms"))
_BOUND = re.compile(r"^[ \t]*(\d+(?:\.\d*)?|\.\d+)[ \t]*(ms|s)[ \t]*$", re.ASCII)


@dataclass(frozen=True)
class Saturated:
    """A row measured at the edge of what the engine sustains (an MLPerf Server row: the
    submitter raised the rate until a latency bound broke), checked by capacity under
    ``bounds_s`` (figure -> seconds) rather than by its latencies; ``bounds_source`` says
    where the bounds come from."""
    bounds_s: dict[str, float]
    bounds_source: str


@dataclass(frozen=True)
class Row:
    name: str
    scenario: Path
    source: str
    setting: str
    kind: str
    load: str
    published: dict[str, float]
    saturated: Saturated | None = None


def _bound_s(value: object) -> float | None:
    """``"2s"`` or ``"200ms"`` in seconds; None for anything else (a bare number too: its
    unit would be the reader's guess). Self-contained, as ``--before-checkout`` imports an
    older fleetsim than the one whose unit parser this would take."""
    match = _BOUND.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    out = float(match.group(1)) * (1e-3 if match.group(2) == "ms" else 1.0)
    return out if 0 < out < math.inf else None


class _FieldError(Exception):
    def __init__(self, field: str, why: str):
        super().__init__(field, why)
        self.field, self.why = field, why


def _saturated(raw: object, kind: str) -> Saturated:
    """A row's ``saturated:`` field (a _FieldError names what is wrong below it)."""
    if kind != "server":
        raise _FieldError("", "only a server row (Poisson arrivals at a rate) is checked by "
                          f"capacity; this row's kind is {kind}")
    if not isinstance(raw, dict):
        raise _FieldError("", "expected a mapping with 'bounds' and 'bounds_source'")
    extra = sorted(set(map(str, raw)) - {"bounds", "bounds_source"})
    if extra:
        raise _FieldError(f".{extra[0]}", "not a field; choose from bounds, bounds_source")
    for key in ("bounds", "bounds_source"):
        if key not in raw:
            raise _FieldError("", f"missing field '{key}'")
    if not isinstance(raw["bounds_source"], str) or not raw["bounds_source"].strip():
        raise _FieldError(".bounds_source", "expected a non-empty string naming where the "
                                              "bounds come from")
    bounds = raw["bounds"]
    if not isinstance(bounds, dict) or not bounds:
        raise _FieldError(".bounds",
                          "expected a mapping of bounds, e.g. {ttft_p99: 2s, tpot_p99: 200ms}")
    out = {}
    for key, value in bounds.items():
        if key not in BOUNDS:
            raise _FieldError(f".bounds.{key}", f"not a bound; choose from {', '.join(BOUNDS)}")
        seconds = _bound_s(value)
        if seconds is None:
            raise _FieldError(f".bounds.{key}", f"{value!r} is not a time with its unit; "
                              "write a positive number of ms or s, e.g. 200ms or 2s")
        out[key] = seconds
    return Saturated(out, raw["bounds_source"].strip())


REQUIRED = ("name", "scenario", "source", "setting", "kind", "load", "published")


def read_table(path: Path) -> list[Row]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise TableError(f"{path}: cannot read the published table ({type(exc).__name__})")
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise TableError(f"{path}: expected a mapping with a list under 'rows'")
    rows, seen = [], set()
    for i, raw in enumerate(data["rows"]):
        where = f"{path}: rows[{i}]"
        if not isinstance(raw, dict):
            raise TableError(f"{where}: expected a mapping")
        for key in REQUIRED:
            if key not in raw:
                raise TableError(f"{where}: missing field '{key}'")
        unknown = [str(k) for k in raw if k not in REQUIRED + ("saturated",)]
        if unknown:
            raise TableError(f"{where}.{unknown[0]}: not a field; choose from "
                             f"{', '.join(REQUIRED + ('saturated',))}")
        if raw["kind"] not in KINDS:
            raise TableError(f"{where}.kind: {raw['kind']!r} is not one of {', '.join(KINDS)}")
        if raw["load"] not in LOADS:
            raise TableError(f"{where}.load: {raw['load']!r} is not one of {', '.join(LOADS)}")
        pub = raw["published"]
        if not isinstance(pub, dict) or not pub:
            raise TableError(f"{where}.published: expected a mapping of figures")
        for key, value in pub.items():
            if key not in FIGURES:
                raise TableError(f"{where}.published.{key}: not a figure; choose from "
                                 f"{', '.join(FIGURES)}")
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not 0 < value < math.inf):
                raise TableError(f"{where}.published.{key}: expected a positive number")
        if not isinstance(raw["name"], str) or not raw["name"]:
            raise TableError(f"{where}.name: expected a non-empty string")
        if raw["name"] in seen:
            raise TableError(f"{where}.name: {raw['name']!r} is used twice")
        seen.add(raw["name"])
        scenario = path.parent / str(raw["scenario"])
        if not scenario.is_file():
            raise TableError(f"{where}.scenario: {scenario} does not exist")
        saturated = None
        if "saturated" in raw:
            try:
                saturated = _saturated(raw["saturated"], raw["kind"])
            except _FieldError as exc:
                raise TableError(f"{where}.saturated{exc.field} (row {raw['name']!r}): "
                                 f"{exc.why}") from None
        rows.append(Row(str(raw["name"]), scenario, str(raw["source"]), str(raw["setting"]),
                        raw["kind"], raw["load"], {k: float(v) for k, v in pub.items()},
                        saturated))
    return rows


def figures(requests, kind: str, warmup_s: float, duration_s: float) -> dict[str, float]:
    """The published figures, read from a run's requests table as the publications
    define them (see the module's docstring)."""
    done = requests[requests["status"].astype(str) == "completed"]
    if kind != "server":
        span = float(done["finish_s"].max() - requests["arrival_s"].min())
        tokens = float(done["output_tokens"].sum())
        steady = done
    else:
        # as MLPerf's LoadGen counts it: the tokens of the queries sent, over the time
        # from the first send to the last completion, so a fleet that falls behind shows
        window = (done["arrival_s"] >= warmup_s) & (done["arrival_s"] < duration_s)
        steady = done[window]
        last_s = float(steady["finish_s"].max()) if len(steady) else math.nan
        span = max(last_s, duration_s) - warmup_s
        tokens = float(steady["output_tokens"].sum())
    out = {"output_tokens_per_s": tokens / span if span > 0 else math.nan}
    ttft = steady["ttft_s"].to_numpy(dtype=np.float64)
    tpot = steady["tpot_s"].to_numpy(dtype=np.float64)
    tpot = tpot[np.isfinite(tpot)]
    for name, values in (("ttft", ttft), ("tpot", tpot)):
        for q in (50, 99):
            out[f"{name}_p{q}_ms"] = (float(np.percentile(values, q)) * 1e3 if len(values)
                                      else math.nan)
    # everything that did not complete (refused or unfinished): a figure that hid it would lie
    out["not_completed"] = int(len(requests) - len(done))
    return out


def _legacy_scenario(row: Row):
    """The row's scenario as a fleetsim from before engines existed reads it: the same
    YAML less the pools' ``engine`` key (all these rows' engines are vLLM or SGLang,
    whose kernels that fleetsim did not tell apart)."""
    from sim.config.scenario import Scenario
    data = yaml.safe_load(row.scenario.read_text())
    for pool in data["pools"].values():
        pool.pop("engine", None)
    scenario = Scenario.model_validate(data)
    scenario._source = str(row.scenario.resolve())
    return scenario


def run_row(row: Row, cost_model: str | None, legacy: bool = False) -> dict:
    from sim.api import load_scenario, run
    scenario = _legacy_scenario(row) if legacy else load_scenario(row.scenario)
    if cost_model is not None:
        data = scenario.model_dump()
        for pool in data["pools"].values():
            pool["cost_model"] = {"type": cost_model}
        source = scenario._source
        scenario = type(scenario).model_validate(data)
        scenario._source = source
    results = run(scenario)
    got = figures(results.requests, row.kind, scenario.warmup, scenario.duration)
    cost_models = sorted({p.get("cost_model", "roofline")
                          for p in results.summary["pools"].values()})
    errors = {k: (got[k] - v) / v for k, v in row.published.items()}
    out = {"name": row.name, "setting": row.setting, "source": row.source,
           "kind": row.kind, "load": row.load, "cost_model": cost_models,
           "published": row.published, "predicted": {k: got[k] for k in row.published},
           "not_completed": got["not_completed"], "error": errors, "saturated": None}
    if row.saturated is not None:
        sat = row.saturated
        if legacy:      # the earlier checkout's search is not this one's: none is run
            out["saturated"] = {"bounds_ms": {k: v * 1e3 for k, v in sat.bounds_s.items()},
                                "bounds_source": sat.bounds_source, "capacity": "not searched"}
        else:
            from calibrate.validate.capacity import check
            out["saturated"] = {**check(scenario, sat.bounds_s, row.published, results,
                                        lambda s, res: figures(res.requests, row.kind,
                                                               s.warmup, s.duration)),
                                "bounds_source": sat.bounds_source}
    return out


def _is_report(path: Path) -> bool:
    """True if ``path`` is a validation-gpu.json this script wrote."""
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(64 << 20))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and bool(data) and all(
        isinstance(r, dict) and "rows" in r and "headline" in r for r in data.values())


def _out_problem(out: Path) -> str | None:
    """Why the two reports cannot be written in ``out`` (checked before any row runs):
    each is absent, or a regular file this script wrote (never a link), and ``out``
    takes a new file. Self-contained: ``--before-checkout`` imports an older fleetsim."""
    json_path = out / "validation-gpu.json"
    for path in (json_path, out / "validation-gpu.md"):
        if os.path.islink(path):
            return f"{path}: a symbolic link; never written through, remove it"
        if os.path.lexists(path) and (not path.is_file() or not _is_report(json_path)):
            return (f"{path}: exists and was not written by this script; choose another "
                    f"--out or remove it")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=out, prefix=".validate-gpu-probe-")
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        return f"--out {out}: {exc.strerror or exc}"
    return None


def _write(path: Path, text: str) -> None:
    """Write ``path`` through a fresh temporary file renamed into place (no links followed).
    Self-contained, as ``_out_problem``: sim.output's writers may be an older fleetsim's."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-{os.getpid()}-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(name, 0o644)
        os.replace(name, path)
    finally:
        if os.path.lexists(name):
            os.unlink(name)


def command(args) -> int:
    """``python -m calibrate validate-gpu``: every row (or ``--only`` those), per cost
    model, printed and written as validation-gpu.{json,md}. Its own errors (exit 2): with
    ``--before-checkout`` the simulator it imports is an earlier checkout's."""
    if args.before_checkout is not None:
        if args.cost_model:
            print("error: --before-checkout runs the checkout's own default cost model; "
                  "drop --cost-model", file=sys.stderr)
            return 2
        if not (args.before_checkout / "sim" / "__init__.py").is_file():
            print(f"error: --before-checkout: {args.before_checkout} holds no fleetsim "
                  f"checkout (no sim/__init__.py)", file=sys.stderr)
            return 2
        if "sim" in sys.modules:
            print("error: --before-checkout: fleetsim is already imported", file=sys.stderr)
            return 2
        sys.path.insert(0, str(args.before_checkout.resolve()))
    try:
        rows = read_table(args.table)
    except TableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    names = {r.name for r in rows}
    unknown = [n for n in args.only if n not in names]
    if unknown:
        print(f"error: --only: no row named {', '.join(unknown)}; rows: "
              f"{', '.join(sorted(names))}", file=sys.stderr)
        return 2
    if args.only:
        rows = [r for r in rows if r.name in args.only]
    legacy = args.before_checkout is not None
    if legacy:                         # closed-loop arrivals came later
        rows = [r for r in rows if r.kind == "server"]
    if not legacy:                     # every scenario is valid before any row runs
        from sim.api import load_scenario
        from sim.config.errors import ScenarioError
        from calibrate.validate.capacity import only_pool
        for row in rows:
            try:
                scenario = load_scenario(row.scenario)
            except ScenarioError as exc:
                print(f"error: row {row.name}: {exc}", file=sys.stderr)
                return 2
            try:
                if row.saturated is not None:
                    only_pool(scenario)
            except ValueError as exc:
                print(f"error: row {row.name}: {row.scenario}: pools: {exc}", file=sys.stderr)
                return 2
    if args.out is not None:
        problem = _out_problem(args.out)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    reports = {}
    for model in (["before"] if legacy else dict.fromkeys(args.cost_model or ["scenario"])):
        results = []
        for row in rows:
            print(f"running {row.name} ({model}) ...", file=sys.stderr, flush=True)
            results.append(run_row(row, None if model in ("scenario", "before") else model,
                                   legacy))
        reports[model] = {"table": str(args.table), "cost_model": model, "rows": results,
                          "headline": headline(results),
                          # which fleetsim ran: this one, or the earlier checkout's
                          "fleetsim": str(Path(sys.modules["sim"].__file__).parent.parent)}
    text = markdown(reports)
    print(text)
    if args.out is not None:
        _write(args.out / "validation-gpu.json", json.dumps(reports, indent=1) + "\n")
        _write(args.out / "validation-gpu.md", text)
    first = next(iter(reports.values()))
    missed = [c for c, h in first["headline"]["below_saturation"].items()
              if h["n"] and not h["met"]]
    if first["headline"]["saturated"]["n"] and not first["headline"]["saturated"]["met"]:
        missed.append("saturated")
    return 1 if args.strict and missed else 0

