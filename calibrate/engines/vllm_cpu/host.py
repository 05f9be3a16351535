"""vLLM V1's host time per step on this CPU: recorded with a stub model, fitted linearly.

    python -m calibrate vllm-host record --out LOG.jsonl [--reps N] [--seed S]
    python -m calibrate vllm-host fit LOG.jsonl [--out FIT.yaml]

``record`` runs ``calibrate/engines/vllm_cpu/host_serve.py`` in the vLLM environment (``make vllm``;
``FLEETSIM_VLLM_PYTHON`` names another): vLLM 0.32's engine with a stub executor in place
of the model forward, over a grid of steps of B = 1..257 sequences and 0..8192 prompt
tokens, several repetitions in a new order each. Its log is JSON lines: a header (vLLM's
version, the CPU model, the date, the grid), then one line per step with B, the prompt
tokens scheduled and the seconds of each host stage.

``fit`` reads the log, takes the median of each stage per grid point (the steps of one
phase, decode count and prefill size over all repetitions), fits

    host_s = c0_s + c1_s_per_seq * B + c2_s_per_prompt_token * prompt_tokens

per stage by least squares on those medians (relative: each point weighted by
1 / its median; no coefficient below 0), prints the fit with each point's residual
and writes the values (3 significant digits) to a small YAML whose ``source`` is the log.
Nothing here imports vLLM or times anything: the tests fit shipped and synthetic logs.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import lsq_linear

from calibrate.engines.vllm_cpu.run_folder import vllm_python
from calibrate.output import starts_with, write_report
from sim.config.errors import ScenarioError
from sim.output.files.output_paths import check_file

ROOT = Path(__file__).resolve().parents[3]
SERVE_SCRIPT = Path(__file__).resolve().parent / "host_serve.py"
FORMAT = "fleetsim-vllm-host-log"
VERSION = 1
HEADER_FIELDS = ("format", "version", "vllm", "cpu", "date")
KEY_FIELDS = ("phase", "decodes", "prefill")       # a grid point
COUNT_FIELDS = ("B", "prompt_tokens")
# the stages fitted, in the order printed; step_s is LLMEngine.step in all
COMPONENTS = ("schedule_s", "update_s", "core_s", "output_s", "detok_s", "step_s",
              "core_cpu_s", "step_cpu_s")
COMPONENT_HELP = {
    "schedule_s": "Scheduler.schedule",
    "update_s": "Scheduler.update_from_output",
    "core_s": "EngineCore.step (schedule + stub forward + update + the rest)",
    "output_s": "OutputProcessor.process_outputs (detokenisation included)",
    "detok_s": "incremental detokeniser (part of output_s)",
    "step_s": "LLMEngine.step in all (core_s + output_s + the rest)",
    "core_cpu_s": "core_s in this thread's CPU seconds (time taken by other work left out)",
    "step_cpu_s": "step_s in this thread's CPU seconds (time taken by other work left out)",
}
COEFFS = ("c0_s", "c1_s_per_seq", "c2_s_per_prompt_token")
DIGITS = 3                   # significant digits written to the YAML
MAX_STEP_S = 60.0
MIN_WEIGHT_S = 1e-7          # a stage's median below this weighs as this (no 1/0)


@dataclass(frozen=True)
class HostLog:
    path: Path
    header: dict
    rows: list[dict]


@dataclass(frozen=True)
class PointMedians:
    key: tuple                    # (phase, decodes, prefill)
    steps: int
    B: float
    prompt_tokens: float
    median_s: dict[str, float]    # component -> median seconds
    spread: dict[str, float]      # component -> interquartile range / median


@dataclass(frozen=True)
class ComponentFit:
    coeffs: dict[str, float]      # c0_s, c1_s_per_seq, c2_s_per_prompt_token
    residual_s: np.ndarray        # per grid point: median - fitted
    rms_residual_s: float
    max_abs_residual_s: float
    median_rel_residual: float    # median over grid points of |residual| / median
    max_rel_residual: float
    median_spread: float          # median over grid points of IQR / median


@dataclass(frozen=True)
class HostFit:
    log: HostLog
    points: list[PointMedians]
    components: dict[str, ComponentFit]


# -- reading ------------------------------------------------------------------------------
def _error(path: Path, line: int, field: str | None, message: str) -> ScenarioError:
    return ScenarioError(message, file=str(path), line=line, field=field)


def _count(value, path: Path, line: int, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _error(path, line, field, f"expected a whole number >= 0, got {value!r}"[:200])
    return value


def _seconds(value, path: Path, line: int, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not (math.isfinite(value) and 0 <= value <= MAX_STEP_S):
        raise _error(path, line, field, f"expected seconds from 0 to {MAX_STEP_S:g}, got "
                                        f"{value!r}"[:200])
    return float(value)


def read_log(path: str | Path) -> HostLog:
    """The log at ``path``; a ScenarioError names the file, line and field at fault."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not text"
        raise _error(path, None, None, f"cannot read ({reason})") from None
    lines = text.splitlines()
    if not lines:
        raise _error(path, None, None, "empty; expected a vllm-host log (a header line, "
                                       "then a line per step)")
    records = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            raise _error(path, n, None, "not a JSON line") from None
        if not isinstance(rec, dict):
            raise _error(path, n, None, f"expected a JSON object, got {type(rec).__name__}")
        records.append((n, rec))
    (n0, header), rows = records[0], records[1:]
    for f in HEADER_FIELDS:
        if f not in header:
            raise _error(path, n0, f, f"missing from the header (a vllm-host log's first "
                                      f"line has {', '.join(HEADER_FIELDS)})")
    if header["format"] != FORMAT:
        raise _error(path, n0, "format", f"expected {FORMAT!r}, got {header['format']!r}"[:200])
    if header["version"] != VERSION:
        raise _error(path, n0, "version", f"this fleetsim reads version {VERSION}, got "
                                          f"{header['version']!r}"[:200])
    if not rows:
        raise _error(path, None, None, "holds no steps after its header")
    out = []
    needed = KEY_FIELDS + COUNT_FIELDS + COMPONENTS
    for n, rec in rows:
        for f in needed:
            if f not in rec:
                raise _error(path, n, f, f"missing (each step line has "
                                         f"{', '.join(needed)})")
        if not isinstance(rec["phase"], str):
            raise _error(path, n, "phase", f"expected a name, got {rec['phase']!r}"[:200])
        row = {"phase": rec["phase"]}
        for f in KEY_FIELDS[1:] + COUNT_FIELDS:
            row[f] = _count(rec[f], path, n, f)
        for f in COMPONENTS:
            row[f] = _seconds(rec[f], path, n, f)
        out.append(row)
    return HostLog(path, header, out)


# -- fitting ------------------------------------------------------------------------------
def point_medians(rows: list[dict]) -> list[PointMedians]:
    """Each grid point's median B, prompt tokens and stage seconds over its steps, in a
    fixed order (phase, decodes, prefill)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in KEY_FIELDS), []).append(r)
    out = []
    for key in sorted(groups):
        g = groups[key]
        med, spread = {}, {}
        for c in COMPONENTS:
            v = np.array([r[c] for r in g])
            m = float(np.median(v))
            q1, q3 = np.percentile(v, [25, 75])
            med[c] = m
            spread[c] = float((q3 - q1) / m) if m > 0 else 0.0
        out.append(PointMedians(key, len(g), float(np.median([r["B"] for r in g])),
                                float(np.median([r["prompt_tokens"] for r in g])), med,
                                spread))
    return out


def fit(log: HostLog) -> HostFit:
    """c0 + c1 * B + c2 * prompt tokens per stage, none negative, by least squares on the
    grid points' medians, each weighted by 1 / its median (so that a 0.1 ms step counts as
    much as a 20 ms one: c0 is read off the small steps); a ScenarioError when the grid
    cannot determine the three."""
    points = point_medians(log.rows)
    X = np.array([[1.0, p.B, p.prompt_tokens] for p in points])
    if len(points) < 3 or np.linalg.matrix_rank(X) < 3:
        raise _error(log.path, None, None,
                     f"the steps cover {len(points)} grid point(s) that do not vary B and "
                     f"prompt tokens independently; c0, c1 and c2 need at least three that "
                     f"do (record a whole grid)")
    comps = {}
    for c in COMPONENTS:
        y = np.array([p.median_s[c] for p in points])
        w = 1.0 / np.maximum(y, MIN_WEIGHT_S)
        beta = lsq_linear(X * w[:, None], y * w, bounds=(0.0, np.inf), method="bvls",
                          tol=1e-12).x
        resid = y - X @ beta
        rel = np.abs(resid) * w
        comps[c] = ComponentFit(dict(zip(COEFFS, (float(b) for b in beta))), resid,
                                float(np.sqrt(np.mean(resid ** 2))),
                                float(np.max(np.abs(resid))), float(np.median(rel)),
                                float(np.max(rel)),
                                float(np.median([p.spread[c] for p in points])))
    return HostFit(log, points, comps)


def _sig(x: float) -> float:
    return float(f"{x:.{DIGITS}g}")


def _source(path: Path) -> str:
    p = path.resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def to_yaml_dict(result: HostFit) -> dict:
    h = result.log.header
    return {
        "model": "host_s = c0_s + c1_s_per_seq * B + c2_s_per_prompt_token * prompt_tokens",
        "source": _source(result.log.path),
        "vllm": h["vllm"], "cpu": h["cpu"], "date": h["date"],
        "loadavg_before": h.get("loadavg_before"), "loadavg_after": h.get("loadavg_after"),
        "grid_points": len(result.points), "steps": len(result.log.rows),
        "components": {c: {**{k: _sig(v) for k, v in f.coeffs.items()},
                           "rms_residual_s": _sig(f.rms_residual_s),
                           "max_abs_residual_s": _sig(f.max_abs_residual_s),
                           "median_rel_residual": _sig(f.median_rel_residual),
                           "max_rel_residual": _sig(f.max_rel_residual),
                           "median_spread": _sig(f.median_spread),
                           "what": COMPONENT_HELP[c]}
                       for c, f in result.components.items()},
    }


def report(result: HostFit, log=print) -> None:
    h = result.log.header
    log(f"vLLM {h['vllm']} host time per step on {h['cpu']}, recorded {h['date']}: "
        f"{len(result.log.rows)} steps, {len(result.points)} grid points")
    if "loadavg_before" in h:
        log(f"machine load average (1/5/15 min) before {h['loadavg_before']}, after "
            f"{h.get('loadavg_after')}")
    log("host_s = c0 + c1 * B + c2 * prompt_tokens (least squares on each grid point's "
        "median, relative)")
    log(f"{'stage':<12}{'c0 ms':>8}{'c1 us/seq':>11}{'c2 us/tok':>11}{'rms ms':>8}"
        f"{'max ms':>8}{'med rel':>9}{'max rel':>9}{'spread':>8}")
    for c, f in result.components.items():
        k = f.coeffs
        log(f"{c:<12}{k['c0_s'] * 1e3:>8.3f}{k['c1_s_per_seq'] * 1e6:>11.3f}"
            f"{k['c2_s_per_prompt_token'] * 1e6:>11.4f}{f.rms_residual_s * 1e3:>8.3f}"
            f"{f.max_abs_residual_s * 1e3:>8.3f}{100 * f.median_rel_residual:>8.1f}%"
            f"{100 * f.max_rel_residual:>8.1f}%{100 * f.median_spread:>7.0f}%")
    log("(rel: |residual| / median; spread: interquartile range / median of a grid point's "
        "steps; each the median or max over grid points)")
    log("per grid point (D decodes beside a prefill of P tokens), ms: median and residual "
        "(median - fit)")
    log(f"{'phase':<8}{'D':>5}{'P':>6}{'B':>6}{'prompt':>7}{'steps':>6}"
        f"{'step_s':>9}{'resid':>8}{'core_s':>9}{'resid':>8}{'output_s':>9}{'resid':>8}")
    comps = [result.components[c] for c in ("step_s", "core_s", "output_s")]
    for i, p in enumerate(result.points):
        phase, d, pre = p.key
        cells = "".join(f"{p.median_s[c] * 1e3:>9.3f}{f.residual_s[i] * 1e3:>8.3f}"
                        for c, f in zip(("step_s", "core_s", "output_s"), comps))
        log(f"{phase:<8}{d:>5}{pre:>6}{p.B:>6.0f}{p.prompt_tokens:>7.0f}{p.steps:>6}{cells}")


FIT_MARK = "# vLLM V1 host time per step, fitted by"      # a fit fleetsim wrote
FIT_HEADER = FIT_MARK + " `python -m calibrate vllm-host fit`\n"


def write_yaml(result: HostFit, path: Path) -> Path:
    """The fit as YAML, replacing only a fit this command wrote."""
    text = FIT_HEADER + yaml.safe_dump(to_yaml_dict(result), sort_keys=False)
    return write_report(path, text, FIT_MARK, "a vllm-host fit fleetsim wrote")


def _is_host_log(path: Path) -> bool:
    """True if ``path`` begins with a vllm-host log's header line."""
    return starts_with(path, '{"format":"%s"' % FORMAT)


# -- recording ----------------------------------------------------------------------------
def record(out: Path, reps: int, seed: int, timeout_s: float = 3600.0) -> Path:
    """Runs the stub-executor engine in the vLLM environment; the log's path (replacing
    only a log this command wrote)."""
    python = vllm_python()
    check_file(out, kind="a vllm-host log fleetsim wrote", is_kind=_is_host_log)
    out.parent.mkdir(parents=True, exist_ok=True)     # the check leaves no folder behind
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", HF_HUB_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", VLLM_LOGGING_LEVEL="WARNING")
    with tempfile.TemporaryFile() as err:       # vLLM's output, quoted only on failure
        try:
            proc = subprocess.run([str(python), str(SERVE_SCRIPT), str(out), "--reps",
                                   str(reps), "--seed", str(seed)], stdout=err, stderr=err,
                                  env=env, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"vllm-host: vLLM did not finish in {timeout_s:.0f} s") \
                from None
        if proc.returncode != 0 or not out.is_file():
            err.seek(0)
            tail = err.read().decode("utf-8", errors="replace")[-2000:]
            raise RuntimeError(f"vllm-host: vLLM exited with {proc.returncode}; the end of "
                               f"its output:\n{tail}")
    return out


def command(args) -> int:
    """``python -m calibrate vllm-host record|fit``."""
    try:
        if args.step == "record":
            print(f"wrote {record(args.out, args.reps, args.seed)}")
            return 0
        result = fit(read_log(args.log))
    except ValueError as exc:           # a missing vLLM environment, named with its fix
        raise ScenarioError(str(exc)) from None
    report(result)
    if args.out is not None:
        print(f"wrote {write_yaml(result, args.out)}")
    return 0
