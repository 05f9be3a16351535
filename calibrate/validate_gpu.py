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

    python -m calibrate.validate_gpu [--cost-model scenario|auto|roofline ...] [--out DIR]
                                     [--only ROW ...] [--strict]
    python calibrate/validate_gpu.py --before-checkout WORKTREE --out DIR   # 'before'

The second form runs the Poisson rows on an earlier fleetsim (a worktree of its commit;
run as a file so that the earlier ``sim`` is the one imported).

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
and of TPOT within 20%, counting p50 on low-load rows and p99 on high-load rows.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

DEFAULT_TABLE = Path("scenarios/validate/gpu/published.yaml")
FIGURES = ("output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms")
KINDS = ("server", "offline", "closed")
LOADS = ("low", "high")
TARGETS = {"throughput": 0.10, "ttft": 0.20, "tpot": 0.20}


class TableError(ValueError):
    """The published table is malformed (named, with the row and field)."""


@dataclass(frozen=True)
class Row:
    name: str
    scenario: Path
    source: str
    setting: str
    kind: str
    load: str
    published: dict[str, float]


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
        for key in ("name", "scenario", "source", "setting", "kind", "load", "published"):
            if key not in raw:
                raise TableError(f"{where}: missing field '{key}'")
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
        rows.append(Row(str(raw["name"]), scenario, str(raw["source"]), str(raw["setting"]),
                        raw["kind"], raw["load"], {k: float(v) for k, v in pub.items()}))
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
    return {"name": row.name, "setting": row.setting, "source": row.source,
            "kind": row.kind, "load": row.load, "cost_model": cost_models,
            "published": row.published, "predicted": {k: got[k] for k in row.published},
            "not_completed": got["not_completed"], "error": errors}


def headline(rows: list[dict]) -> dict[str, dict]:
    """Median and worst |error| per class: throughput (every row that publishes it);
    TTFT and TPOT at p50 on low-load rows and at p99 on high-load rows."""
    classes: dict[str, list[tuple[str, float]]] = {"throughput": [], "ttft": [], "tpot": []}
    for r in rows:
        for key, err in r["error"].items():
            if key == "output_tokens_per_s":
                classes["throughput"].append((r["name"], err))
                continue
            metric, q = key.split("_")[0], key.split("_")[1]
            if (q == "p50") == (r["load"] == "low"):
                classes[metric].append((f"{r['name']} {q}", err))
    out = {}
    for cls, errs in classes.items():
        mags = [abs(e) for _, e in errs if math.isfinite(e)]
        worst = max(errs, key=lambda x: abs(x[1]) if math.isfinite(x[1]) else math.inf,
                    default=None)
        median = statistics.median(mags) if len(mags) == len(errs) and mags else math.nan
        out[cls] = {"n": len(errs), "median_abs": median,
                    "worst": None if worst is None else {"row": worst[0], "error": worst[1]},
                    "target": TARGETS[cls],
                    "met": bool(math.isfinite(median) and median <= TARGETS[cls])}
    return out


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x * 100:+.0f}%"


def _fmt(key: str, v: float) -> str:
    if not math.isfinite(v):
        return "n/a"
    return f"{v:,.0f}" if key == "output_tokens_per_s" else f"{v:,.1f}"


UNITS = {"output_tokens_per_s": "output tok/s", "ttft_p50_ms": "TTFT p50 ms",
         "ttft_p99_ms": "TTFT p99 ms", "tpot_p50_ms": "TPOT p50 ms", "tpot_p99_ms": "TPOT p99 ms"}


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
    import os
    import tempfile
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
    """Write ``path`` through a fresh temporary file renamed into place (no links followed)."""
    import os
    import tempfile
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-{os.getpid()}-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(name, 0o644)
        os.replace(name, path)
    finally:
        if os.path.lexists(name):
            os.unlink(name)


def markdown(reports: dict[str, dict]) -> str:
    """One table for the published figures with a column per cost model run, then the
    headline of each."""
    names = list(reports)
    first = reports[names[0]]["rows"]
    cols = " | ".join(f"{n}: fleetsim | error" for n in names)
    lines = [f"| setting | figure | published | {cols} | source |",
             "|---|---|---:|" + "---:|---:|" * len(names) + "---|"]
    for i, r in enumerate(first):
        for key, pub in r["published"].items():
            cells = " | ".join(f"{_fmt(key, reports[n]['rows'][i]['predicted'][key])} | "
                               f"{_pct(reports[n]['rows'][i]['error'][key])}" for n in names)
            lines.append(f"| {r['setting']} | {UNITS[key]} | {_fmt(key, pub)} | {cells} | "
                         f"{r['source']} |")
    lines += ["", "| class | rows | target | "
              + " | ".join(f"{n}: median abs error | {n}: worst" for n in names) + " |",
              "|---|---:|---:|" + "---:|---|" * len(names)]
    for cls in reports[names[0]]["headline"]:
        h0 = reports[names[0]]["headline"][cls]
        cells = []
        for n in names:
            h = reports[n]["headline"][cls]
            median = ("n/a" if not math.isfinite(h["median_abs"])
                      else f"{h['median_abs'] * 100:.0f}% ({'met' if h['met'] else 'missed'})")
            worst = ("" if h["worst"] is None
                     else f"{_pct(h['worst']['error'])} ({h['worst']['row']})")
            cells.append(f"{median} | {worst}")
        lines.append(f"| {cls} | {h0['n']} | {h0['target'] * 100:.0f}% | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m calibrate.validate_gpu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", type=Path, default=DEFAULT_TABLE,
                    help="the published table (default: %(default)s)")
    ap.add_argument("--cost-model", action="append", choices=("scenario", "auto", "roofline"),
                    default=None,
                    help="every pool's cost model: scenario (what each scenario says, "
                         "fleetsim's default when it says nothing), auto or roofline; "
                         "repeat to compare (default: scenario)")
    ap.add_argument("--only", action="append", default=[],
                    help="run only this row (by name; repeatable)")
    ap.add_argument("--out", type=Path, default=None,
                    help="write validation-gpu.json and validation-gpu.md here")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when a headline target of the first cost model is missed")
    ap.add_argument("--before-checkout", type=Path, default=None,
                    help="run the Poisson rows on the fleetsim checked out here (e.g. a git "
                         "worktree of an earlier commit) instead of this one, with its "
                         "default cost model: the table's 'before' column")
    args = ap.parse_args(argv)
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
        for row in rows:
            try:
                load_scenario(row.scenario)
            except ScenarioError as exc:
                print(f"error: row {row.name}: {exc}", file=sys.stderr)
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
    missed = [c for c, h in first["headline"].items() if h["n"] and not h["met"]]
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
