"""`fleetsim check`: sizing and latency predictions against a committed baseline.

For each scenario: the replicas each pool needs to meet the SLOs (as
configured, no other options), each SLO's figure as configured, and the
scenario's own latencies as run. A figure that moved past the tolerance, or an
SLO the scenario as configured breaks, fails the check (exit 1), and the failure
names each SLO that broke or moved (value, target, the baseline's value) and the
replicas now needed; ``--update`` writes the baseline anew.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from collections.abc import Callable, Iterable
from pathlib import Path

import sim
from sim.config.errors import ScenarioError, dotted_path
from sim.config.inputs import InputFileError, read_bytes, shown
from sim.config.scenario import Scenario
from sim.planning.budget import check_budget, replica_cap
from sim.planning.options import configured_option
from sim.planning.size import min_replicas
from sim.planning.trial import reached, verdict
from sim.output.slo import met
from sim.planning.verdict import Confidence
from sim.config.slos import METRICS, Slo, targets

LATENCY_KEYS = ("ttft_p99", "tpot_p99", "e2e_p99")


def measure_scenario(path: str, slos: list[Slo], allow_paths: Iterable[str] = (),
                     confidence: Confidence | None = None,
                     scenario: Scenario | None = None) -> dict:
    """Required replicas per pool and the run's latencies, against ``slos`` or, when none
    are given, the scenario's own fleet-wide ``slos:``; the SLOs used are recorded. With
    ``confidence`` each verdict is replicated until that sure, and a pool whose count
    rests on an uncertain verdict says so (``confident``). ``scenario``: the one at
    ``path`` already loaded (with any overrides), else it is loaded here."""
    if scenario is None:
        scenario = sim.load_scenario(path, allow_paths=allow_paths)
    if not slos and scenario.slos is not None:
        slos = targets(scenario.slos)
    if not slos:
        raise ScenarioError("no SLO to size against: give --slo (e.g. --slo ttft_p99=2s) or "
                            "fleet-wide objectives in the scenario's slos: block (a team's "
                            "own are not sized for)", file=str(path), field="slos")
    out: dict = {"pools": {}, "latency_s": {}, "slo_met": True,
                 "slos": {s.metric: s.target for s in slos}}
    check_budget(scenario, list(scenario.pools), options=False,     # before any simulation
                 confidence=confidence)
    ran = sim.run(scenario)              # the scenario as configured, run once
    summary = ran.summary
    busy = reached(scenario, ran.requests)
    for key in LATENCY_KEYS:
        name, stat = key.split("_")
        out["latency_s"][key] = summary["latency_s"][name][stat]
    for pool, cfg in scenario.pools.items():
        if pool not in busy:                    # idle capacity: nothing to size or break
            out["pools"][pool] = {"required_replicas": 0, "slo_met_as_configured": True}
            continue
        # the replicas the load needs, from 1: a sizing floor kept for redundancy would
        # hide a drift in that need
        need, trials = min_replicas(scenario, pool, slos, configured_option(cfg),
                                    replica_cap(scenario, pool), confidence, floor=1)
        as_configured = verdict(scenario, pool, slos, confidence, ran=ran)
        out["pools"][pool] = {"required_replicas": need,
                              "slo_met_as_configured": as_configured.ok,
                              # each SLO's figure as configured (None: too few requests
                              # completed for it), which a failed check names
                              "slo_values": {m: (float(v) if math.isfinite(v) else None)
                                             for m, v in as_configured.estimate.items()}}
        if cfg.fixed_size:
            out["pools"][pool]["replicas"] = cfg.replicas
        if confidence is not None:
            decided = [trials[n] for n in (need, (need or 0) - 1) if n in trials]
            out["pools"][pool]["confident"] = bool(
                as_configured.certain and all(t.verdict.certain for t in decided))
        out["slo_met"] &= as_configured.ok
    return out


def drift(base: dict, now: dict, tolerance: float) -> list[str]:
    """What moved from the baseline's entry ``base`` to the figures ``now``: a line each
    ([] where nothing did). Figures made under other SLOs or another --set list are not
    compared: that difference is the one line each."""
    problems = []
    if "slos" in base and base["slos"] != now["slos"]:
        shown_slos = lambda d: ", ".join(f"{k}={v:g}" for k, v in sorted(d.items())) or "none"
        problems.append(f"SLOs differ from the baseline's ({shown_slos(now['slos'])} against "
                        f"{shown_slos(base['slos'])}): required replicas are not comparable; "
                        "check with the baseline's SLOs or record it anew with --update")
    if sorted(base.get("set", [])) != sorted(now.get("set", [])):
        shown_sets = lambda sets: " ".join(f"--set {s}" for s in sets) or "no --set"
        problems.append(f"--set differs from the baseline's ({shown_sets(now.get('set', []))} "
                        f"against {shown_sets(base.get('set', []))}): its figures were made "
                        "under other settings and are not comparable; check with the "
                        "baseline's --set or record it anew with --update")
    if problems:
        return problems
    for pool, fig in now["pools"].items():
        old = base.get("pools", {}).get(pool, {}).get("required_replicas")
        new = fig["required_replicas"]
        unsure = " (an uncertain verdict: allow more replications with " \
                 "--max-replications)" if fig.get("confident") is False else ""
        before = base.get("pools", {}).get(pool, {})
        slos = explained(now.get("slos", {}), fig.get("slo_values", {}),
                         before.get("slo_values", {}), tolerance)
        recorded = pool in base.get("pools", {})
        if not recorded:
            problems.append(f"pool {pool}: not in the baseline (record it with --update)")
        if not fig["slo_met_as_configured"]:     # one line: what broke, and what it needs
            needs = f"required replicas {_count(old)} -> {_count(new)}" \
                if recorded and old != new else _needed(new)
            problems.append(f"pool {pool}: breaks the SLOs as configured{_configured(fig)}"
                            + (f": {slos}" if slos else "") + f"; {needs}{unsure}")
        elif recorded and old != new:
            problems.append(f"pool {pool}: required replicas {_count(old)} -> "
                            f"{_count(new)}{unsure}"
                            + (f"; as configured{_configured(fig)}: {slos}" if slos else ""))
    for key, new in now["latency_s"].items():
        old = base.get("latency_s", {}).get(key)
        if old is None or new is None:
            moved = old != new
        else:
            moved = abs(new - old) > tolerance * abs(old)
        if moved:
            problems.append(_latency_moved(key, old, new, now.get("slos", {})))
    return problems


def _latency_moved(key: str, old: float | None, new: float | None,
                   slos: dict[str, float]) -> str:
    """A latency that moved: from the baseline's value to today's, the change, and where an
    SLO bounds it, its target and whether today's value is within it."""
    change = f" ({(new - old) / old:+.1%})" if old and new is not None else ""
    line = f"{key}: {_seconds(key, old)} -> {_seconds(key, new)}{change}"
    if key not in slos:
        return line
    from sim.output.table import slo_value_text
    target = slos[key]
    side = "within" if new is not None and met({key: new}, [Slo(key, target)]) else "over"
    return f"{line}, {side} its target {slo_value_text(key, target)}"


def explained(targets: dict[str, float], values: dict, baseline: dict | None,
              tolerance: float) -> str:
    """Each SLO that fails now or moved past ``tolerance`` from the baseline's figure: its
    metric, its value now, its target and the baseline's value ("" where none did; with
    no ``baseline``, the failing ones without a baseline's value)."""
    from sim.output.table import slo_value_text       # (rich: only where a line is made)

    said = []
    recorded = baseline is not None
    baseline = baseline or {}
    for metric, target in targets.items():
        if metric not in values:
            continue
        value, old = values[metric], baseline.get(metric)
        # None: the percentile has too few completed requests, a miss as in the verdict
        missed = value is None or not met({metric: value}, [Slo(metric, target)])
        moved = (old is None) != (value is None) or (
            value is not None and abs(value - old) > tolerance * abs(old))
        if not (missed or moved and metric in baseline):
            continue
        now_text = "none (too few requests completed)" if value is None else \
            slo_value_text(metric, value)
        side = ("under" if metric == "attainment" else "over") if missed else "within"
        was = "not recorded" if metric not in baseline else \
            "none" if old is None else slo_value_text(metric, old)
        said.append(f"{metric} {now_text}, {side} its target {slo_value_text(metric, target)}"
                    + (f" (baseline {was})" if recorded else ""))
    return "; ".join(said)


def broken_fleets(verdicts: list[Verdict]) -> list[str]:
    """A line per pool whose fleet, as recorded by ``--update``, breaks its SLOs: each
    failing SLO's value and target, and the replicas the SLOs need."""
    lines = []
    for v in verdicts:
        for pool, fig in (v.measured or {}).get("pools", {}).items():
            if fig["slo_met_as_configured"]:
                continue
            slos = explained(v.measured["slos"], fig.get("slo_values", {}), None, 0.0)
            lines.append(f"{v.scenario}: pool {pool} breaks its SLOs as configured"
                         f"{_configured(fig)}" + (f": {slos}" if slos else "")
                         + f"; {_needed(fig['required_replicas'])}")
    return lines


def _configured(fig: dict) -> str:
    replicas = fig.get("replicas")
    return "" if replicas is None else \
        f" ({replicas} replica{'' if replicas == 1 else 's'})"


def _needed(replicas: int | None) -> str:
    """The replicas the SLOs need now."""
    return "no replica count within the sizing cap meets them" if replicas is None else \
        f"needs {replicas} replica{'' if replicas == 1 else 's'}"


def _count(replicas: int | None) -> str:
    return "none within the cap" if replicas is None else str(replicas)


def _seconds(key: str, value: float | None) -> str:
    """A latency as the rest of check's message gives figures ("62.3 ms", "2.00 s")."""
    from sim.output.table import slo_value_text
    return "none (no request completed)" if value is None else slo_value_text(key, value)


# larger than any figure a run gives: a baseline number past it was not written by fleetsim
MAX_FIGURE = 1e15


def _figure_problem(value) -> str | None:
    """What is wrong with a baseline's figure, never quoting it: None where it is None or a
    finite number of sensible size and not negative (replica counts and latencies: a huge
    integer is refused before any arithmetic turns it into a float)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = {dict: "an object", list: "a list", str: "a string", bool: "true or false"}
        return f"is {kind.get(type(value), 'not a number')}, not a number or null"
    if isinstance(value, float) and not math.isfinite(value):
        return "is not a finite number"
    if value < 0:
        return "is below 0"
    return "is larger than any figure a run gives" if value > MAX_FIGURE else None


def _baseline_shape_error(data) -> str | None:
    """What is wrong with a parsed baseline, or None: the entry (by its number, and its
    scenario's path), the field and what is wrong with it, never a value or a key that is
    no figure's."""
    if not isinstance(data, dict):
        return "the top level must be an object of scenario paths"
    for i, (key, entry) in enumerate(data.items()):
        where = f"entry {i + 1}" + (f" ({dotted_path((key,))})"
                                    if key.endswith((".yaml", ".yml")) else "")
        if not isinstance(entry, dict):
            return f"{where}: must be an object of pools, latency_s and slos"
        pools, latency = entry.get("pools", {}), entry.get("latency_s", {})
        if not isinstance(pools, dict):
            return f"{where}: pools: must be an object of pools"
        for pool, figures in pools.items():
            field = f"pools.{dotted_path((pool,))}"
            if not isinstance(figures, dict):
                return f"{where}: {field}: must be an object with required_replicas"
            wrong = _figure_problem(figures.get("required_replicas"))
            if wrong is not None:
                return f"{where}: {field}.required_replicas: {wrong} (a count of at " \
                       f"least 0, or null where none within the cap met the SLOs)"
            values = figures.get("slo_values", {})
            if not isinstance(values, dict) or not all(
                    k in METRICS and _figure_problem(v) is None for k, v in values.items()):
                return f"{where}: {field}.slo_values: must be an object of SLO metrics " \
                       f"({', '.join(METRICS)}) and numbers (at least 0) or null"
        if not isinstance(latency, dict):
            return f"{where}: latency_s: must be an object of latencies"
        for name, value in latency.items():
            wrong = _figure_problem(value)
            if wrong is not None:
                field = f"latency_s.{name}" if name in LATENCY_KEYS else "latency_s"
                return f"{where}: {field}: {wrong} (seconds, at " \
                       f"least 0, or null where no request completed)"
        sets = entry.get("set", [])
        if not isinstance(sets, list) or not all(isinstance(x, str) for x in sets):
            return f"{where}: set: must be a list of the --set PATH=VALUE it was made with"
        slos = entry.get("slos", {})
        if not isinstance(slos, dict) or not all(
                k in METRICS and v is not None and _figure_problem(v) is None
                for k, v in slos.items()):
            return f"{where}: slos: must be an object of SLO metrics ({', '.join(METRICS)}) " \
                   f"and numbers (at least 0)"
    return None


def read_baseline(baseline: Path) -> dict:
    """The baseline's figures; {} when it does not exist yet. A file that is not a
    regular file, not UTF-8 JSON or not shaped like a baseline is a located error
    that does not quote it."""
    if not baseline.exists() and not baseline.is_symlink():
        return {}
    where = shown(baseline)
    try:
        raw = read_bytes(baseline)
    except InputFileError as exc:
        raise ScenarioError(exc.message, file=where, field="--baseline") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ScenarioError("not UTF-8 text; expected the JSON `fleetsim check --update` "
                            "writes", file=where, field="--baseline") from None
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"not JSON ({exc.msg}); expected what `fleetsim check "
                            f"--update` writes", file=where, line=exc.lineno,
                            column=exc.colno, field="--baseline") from None
    except RecursionError:
        raise ScenarioError("not a baseline: nesting too deep", file=where,
                            field="--baseline") from None
    except ValueError:              # an integer past Python's digit limit
        raise ScenarioError("not a baseline: a number too long to read", file=where,
                            field="--baseline") from None
    problem = _baseline_shape_error(data)
    if problem is not None:
        raise ScenarioError(f"not a `fleetsim check` baseline: {problem}", file=where,
                            field="--baseline")
    return data


def is_baseline(path: Path) -> bool:
    """True if ``path`` reads as a baseline `fleetsim check --update` wrote: a JSON
    object of scenario entries, each with ``pools`` and ``latency_s``."""
    try:
        data = read_baseline(path)
    except ScenarioError:
        return False
    return bool(data) and all(isinstance(e, dict) and "pools" in e and "latency_s" in e
                              for e in data.values())


@dataclass(frozen=True)
class Verdict:
    scenario: str                  # its key in the baseline
    problems: list[str]            # empty: within the baseline
    measured: dict | None = None   # its figures now, as a baseline entry records them
    baseline: dict | None = None   # its entry in the baseline (None: not in it)


def baseline_key(path: str, baseline: Path) -> str:
    """A scenario's key in a baseline: its path relative to the baseline's folder, with
    '/' (the same whether typed as ./s.yaml, s.yaml or an absolute path, from any
    working directory)."""
    try:
        return Path(os.path.relpath(Path(path).resolve(),
                                    baseline.parent.resolve())).as_posix()
    except ValueError:             # another drive: no relative path
        return Path(path).resolve().as_posix()


def check(paths: list[str], baseline: Path, slos: list[Slo], tolerance: float,
          update: bool, allow_paths: Iterable[str] = (), confidence: Confidence | None = None,
          load: Callable[[str], Scenario] | None = None, sets: Iterable[str] = ()
          ) -> tuple[int, list[str], list[Verdict]]:
    """Measure ``paths`` and compare them with ``baseline``; with ``update``, write
    the baseline instead (the caller has checked it may be written: see
    :func:`sim.output.files.output_paths.check_file`). ``load`` reads a scenario (the CLI's
    applies --set, the ``sets`` it records in each entry and compares with the
    baseline's); every scenario is loaded before any is measured."""
    from sim.output.files.atomic_write import write_file
    exists = baseline.exists() or baseline.is_symlink()
    if not update and not exists:
        raise ScenarioError("no such baseline; make it with --update (it records today's "
                            "figures)", file=shown(baseline), field="--baseline")
    stored = read_baseline(baseline) if exists else {}      # (read before any work)
    load = load or (lambda p: sim.load_scenario(p, allow_paths=allow_paths))
    scenarios = [load(p) for p in paths]         # a bad scenario or --set before any run
    current = {baseline_key(p, baseline): {**measure_scenario(p, slos, allow_paths, confidence,
                                                             scenario), "set": list(sets)}
               for p, scenario in zip(paths, scenarios)}
    if update:      # the other scenarios' entries stay: a baseline serves a whole suite
        gone = set(current) | {str(p) for p in paths}   # (older baselines: as typed)
        kept = {k: v for k, v in stored.items() if k not in gone}
        write_file(baseline, json.dumps({**kept, **current}, indent=2, sort_keys=True)
                   + "\n")
        return 0, [f"wrote {shown(baseline)} ({len(current)} scenarios recorded"
                   + (f", {len(kept)} others kept as they were)" if kept else ")")], \
            [Verdict(key, [], now) for key, now in current.items()]
    results = []
    for (key, now), typed in zip(current.items(), paths):
        entry = stored.get(key, stored.get(str(typed)))    # (older baselines: as typed)
        if entry is None:
            results.append(Verdict(key, ["not in the baseline (run with --update)"], now))
        else:
            results.append(Verdict(key, drift(entry, now, tolerance), now, entry))
    lines = [f"{v.scenario}: {p}" for v in results for p in v.problems or ["ok"]]
    return (1 if any(v.problems for v in results) else 0), lines, results
