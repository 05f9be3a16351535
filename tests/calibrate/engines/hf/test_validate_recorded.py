"""The validation's fit and comparison on recorded engine runs: deterministic, whatever
the machine's speed.

``tests/data/validate-recorded/`` holds what ``fleetsim validate`` recorded when it served
``scenarios/validate/smoke.yaml`` (continuous batching) and ``single.yaml``
(``generate()``, one at a time) on transformers, with the ``validation.json`` that run
wrote (see the folder's README). Re-analysed from the logs, without the engine, the fit
of the engine terms on the recorded calibration grid and the comparison of the recorded
replays with fleetsim's simulation must give that file's figures exactly.
"""
from __future__ import annotations

import copy
import gzip
import json
import math
from pathlib import Path

import pytest
import yaml

from calibrate.engines.step_fit import fit_continuous, fit_sequential
from calibrate.engines.hf.engine_log import FILE_NAME, EngineLog, EngineLogError, find_logs
from calibrate.engines.records import ContinuousLimits, EngineRecord, EngineStep
from calibrate.engines.hf import ValidationError, draw_requests, load_workload, validate_logs

ROOT = Path(__file__).resolve().parents[4]
DATA = ROOT / "tests" / "data" / "validate-recorded"
EXPECTED = json.loads((DATA / "validation.json").read_text(encoding="utf-8"))
WORKLOADS = [w["name"] for w in EXPECTED["workloads"]]
QUIET = {"log": lambda _m: None}


def close(got, want, rel: float, where: str = "") -> None:
    """``got`` equals ``want`` (nested dicts and lists), numbers within ``rel``."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), where
        for k in want:
            close(got[k], want[k], rel, f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            close(g, w, rel, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        if math.isnan(want):
            assert math.isnan(got), where
        else:
            assert got == pytest.approx(want, rel=rel, abs=1e-15), where
    else:
        assert got == want, where


def _log(name: str) -> EngineLog:
    return EngineLog.read(DATA / name / FILE_NAME)


@pytest.fixture(scope="module")
def reanalysed(tmp_path_factory):
    out = tmp_path_factory.mktemp("recorded") / "out"
    report = validate_logs([DATA], out, **QUIET)
    return report, json.loads((out / "validation.json").read_text(encoding="utf-8")), out


# -- what was recorded ------------------------------------------------------------------------
@pytest.mark.parametrize("name", WORKLOADS)
def test_recorded_logs_hold_what_the_comparison_needs(name, tmp_path):
    """Every replay served the scenario's own requests (same lengths, in order, none handed
    over before its time), each with arrival <= first token <= finish; a continuous
    engine's steps stay within its limits, follow one another, and compute each prompt
    token once and each output token after the first in a decode."""
    elog = _log(name)
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(elog.scenario), encoding="utf-8")
    drawn = draw_requests(load_workload(scen))
    assert elog.workload == name and len(elog.replays) == 3
    for records, steps in elog.replays:
        assert [(r.prompt_tokens, r.output_tokens) for r in records] == \
            [(d.prompt_tokens, d.output_tokens) for d in drawn]
        assert all(r.arrival_s >= d.arrival_s - 1e-3 for r, d in zip(records, drawn))
        assert all(r.arrival_s <= r.first_token_s <= r.finish_s for r in records)
        if elog.kind == "single":
            # one request at a time, in arrival order
            assert all(a.finish_s <= b.first_token_s for a, b in zip(records, records[1:]))
            continue
        lim = elog.limits
        assert steps and all(a.end_s <= b.start_s for a, b in zip(steps, steps[1:]))
        assert all(sum(q for q, _, _ in s.seqs) <= lim.max_batch_tokens and
                   len(s.seqs) <= lim.max_requests_per_batch for s in steps)
        assert sum(q for s in steps for q, _, p in s.seqs if p) == \
            sum(r.prompt_tokens for r in records)
        assert sum(1 for s in steps for _, _, p in s.seqs if not p) == \
            sum(r.output_tokens - 1 for r in records)
    groups = [g for g, _ in elog.calibration]
    assert groups == sorted(groups) and len(set(groups)) >= 3


# -- the fit on the recorded calibration grid ----------------------------------------------------
@pytest.mark.parametrize("name", WORKLOADS)
def test_fit_of_the_recorded_calibration_grid(name):
    """The engine terms fitted on the recorded grid are the recorded run's, and so are the
    fit's step errors (held back, all steps, the plain profile's)."""
    elog = _log(name)
    fit = (fit_sequential(elog.profile, elog.calibration, **QUIET) if elog.kind == "single"
           else fit_continuous(elog.profile, elog.limits, elog.calibration, **QUIET))
    want = EXPECTED["engine_fits"][name]
    close(fit.engine, want["terms"], 1e-6, "terms")
    assert len(fit.rows) == want["steps"]
    close(fit.held_back, want["held_back_step_error"], 1e-6, "held_back")
    close(fit.all_steps, want["step_error"], 1e-6, "all_steps")
    close(fit.without_engine, want["step_error_without_engine_terms"], 1e-6, "plain")
    # the fit explains the grid far better than the plain profile does
    assert fit.all_steps["median"] < fit.without_engine["median"]


# -- the recorded workloads against their simulation -------------------------------------------
def test_recorded_workloads_against_their_simulation(reanalysed):
    """Measured figures from the logs (pure arithmetic: equal to 1e-12), fleetsim's
    predictions of the same requests at the times the engine received them, and the
    errors, as the recorded run wrote them."""
    _, got, _ = reanalysed
    by_name = {w["name"]: w for w in got["workloads"]}
    assert sorted(by_name) == sorted(WORKLOADS)
    for e in EXPECTED["workloads"]:
        g = by_name[e["name"]]
        assert (g["engine"], g["requests"], g["replays"]) == (e["engine"], e["requests"],
                                                              e["replays"])
        close(g["measured"], e["measured"], 1e-12, f"{e['name']}.measured")
        close(g["predicted"], e["predicted"], 1e-6, f"{e['name']}.predicted")
        close(g["rel_error"], e["rel_error"], 1e-5, f"{e['name']}.rel_error")
        close(g["step_error"], e["step_error"], 1e-6, f"{e['name']}.step_error")
        assert g["engine_wall_s"] == e["engine_wall_s"]
    assert (got["host"], got["transformers_version"]) == (EXPECTED["host"],
                                                         EXPECTED["transformers_version"])


def test_reanalysis_writes_what_validate_writes(reanalysed):
    """The same files as a live validation, the logs copied in (so the folder can be
    analysed again, to the same figures), and a table with every targeted figure."""
    report, got, out = reanalysed
    for name in ("validation.csv", "validation.json", "validation.txt", "ttft_cdf.png"):
        assert (out / name).stat().st_size > 0
    for name in WORKLOADS:
        for f in (FILE_NAME, "engine_requests.csv", "sim_requests.csv"):
            assert (out / name / f).is_file()
        engine = yaml.safe_load((out / "profile" / f"{name}-engine.yaml").read_text())
        close(engine["engine"]["model_scale"], EXPECTED["engine_fits"][name]["terms"]
              ["model_scale"], 1e-6)
    rows = report.rows()
    assert {r["workload"] for r in rows} == set(WORKLOADS)
    again = validate_logs([out], out.parent / "again", **QUIET)
    assert [r.predicted for r in again.results] == [r.predicted for r in report.results]
    assert [r.measured for r in again.results] == [r.measured for r in report.results]


# -- the log file ------------------------------------------------------------------------------
def _small_log() -> EngineLog:
    steps = [EngineStep(0.0, 0.01, ((5, 0, True), (1, 9, False))),
             EngineStep(0.01, 0.015, ((1, 5, False),), 0.0)]
    return EngineLog(workload="w", kind="continuous", engine="e",
                     limits=ContinuousLimits(64, 4, 16, 32), scenario={"name": "w"},
                     profile={"kind": "p"}, calibration=[(0, steps[0]), (1, steps[1])],
                     replays=[([EngineRecord(0.0, 0.01, 0.015, 5, 2)], steps)],
                     meta={"host": "h"})


def test_log_round_trips_exactly_and_writes_the_same_bytes(tmp_path):
    log = _small_log()
    a, b = log.write(tmp_path / "a.json.gz"), log.write(tmp_path / "b.json.gz")
    assert a.read_bytes() == b.read_bytes()
    back = EngineLog.read(a)
    assert back == log
    assert back.calibration[0][1].idle_before_s == math.inf


def _write_json(path: Path, data) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump(data, fh)
    return path


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.update(format="other"), "not an engine log"),
    (lambda d: d.update(version=99), "version: this fleetsim reads version 1"),
    (lambda d: d.update(kind="batch"), "kind: expected one of continuous, single"),
    (lambda d: d.pop("replays"), "replays: expected a list"),
    (lambda d: d.update(replays=[]), "holds no replay"),
    (lambda d: d["replays"][0]["requests"][0].__setitem__(0, 1e6),
     r"replays\[0\].requests\[0\]: expected arrival <= first token <= finish"),
    (lambda d: d["replays"][0]["steps"][0].__setitem__(3, [[1, 2]]),
     r"replays\[0\].steps\[0\]: a sequence is"),
    (lambda d: d["calibration"][0].__setitem__(2, float("nan")), "expected a time from 0"),
    (lambda d: d["calibration"][0].__setitem__(2, 1e308), "expected a time from 0"),
    (lambda d: d["replays"][0]["steps"][0][3][0].__setitem__(0, 10 ** 25),
     r"replays\[0\].steps\[0\]: expected a whole number from 0 to 10,000,000"),
    (lambda d: d["limits"].pop("page_size"), "limits.page_size: expected a whole number"),
])
def test_a_bad_log_is_named_with_its_field(tmp_path, edit, match):
    data = json.loads(json.dumps(_small_log().to_json()))
    edit(data)
    path = _write_json(tmp_path / "bad.json.gz", data)     # NaN as json writes it
    with pytest.raises(EngineLogError, match=match) as exc:
        EngineLog.read(path)
    assert str(path) in str(exc.value)


def test_a_file_that_is_not_a_log_is_refused_without_showing_its_contents(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("password=hunter2\n")
    with pytest.raises(EngineLogError, match="not a gzip-compressed engine log") as exc:
        EngineLog.read(secret)
    assert "hunter2" not in str(exc.value)
    packed = tmp_path / "packed.gz"
    with gzip.open(packed, "wt") as fh:
        fh.write("password=hunter2\n")
    with pytest.raises(EngineLogError, match="not JSON") as exc:
        EngineLog.read(packed)
    assert "hunter2" not in str(exc.value)
    with pytest.raises(EngineLogError, match="cannot read"):
        EngineLog.read(tmp_path)
    with pytest.raises(EngineLogError, match="no engine_log.json.gz"):
        find_logs([tmp_path])
    with pytest.raises(EngineLogError, match="no such file"):
        find_logs([tmp_path / "nope"])


def test_logs_of_one_workload_twice_or_of_two_profiles_are_refused(tmp_path):
    smoke = DATA / "validate-smoke" / FILE_NAME
    copied = tmp_path / "copy.json.gz"
    copied.write_bytes(smoke.read_bytes())
    with pytest.raises(ValidationError, match="distinct workloads"):
        validate_logs([smoke, copied], tmp_path / "o", **QUIET)
    other = _log("validate-single")
    other.profile = copy.deepcopy(other.profile)
    other.profile["note"] = "another profile"
    other.write(tmp_path / "single.json.gz")
    with pytest.raises(ValidationError, match="different calibrated profiles"):
        validate_logs([smoke, tmp_path / "single.json.gz"], tmp_path / "o2", **QUIET)
    assert not (tmp_path / "o").exists() and not (tmp_path / "o2").exists()


def test_a_log_whose_scenario_disagrees_with_its_engine_is_refused(tmp_path):
    elog = _log("validate-smoke")
    elog.limits = ContinuousLimits(256, 32, 16, elog.limits.num_blocks)
    elog.write(tmp_path / FILE_NAME)
    with pytest.raises(EngineLogError, match="differ from its scenario"):
        validate_logs([tmp_path / FILE_NAME], tmp_path / "o", **QUIET)


# -- the command line ----------------------------------------------------------------------------
def test_cli_from_logs_prints_the_table(tmp_path, capsys):
    from sim.cli import main
    assert main(["validate", "--from-logs", str(DATA), "--out", str(tmp_path / "o"),
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in WORKLOADS) and "TTFT p50" in out
    assert (tmp_path / "o" / "validation.json").is_file()


@pytest.mark.parametrize("argv, match", [
    (["validate"], "give validation scenarios"),
    (["validate", "scenarios/validate/smoke.yaml", "--from-logs", "x"], "not both"),
    (["validate", "--from-logs", str(DATA), "--replays", "2"], "--replays"),
    (["validate", "--from-logs", "no/such/folder"], "no/such/folder: no such file"),
])
def test_cli_from_logs_errors(tmp_path, capsys, argv, match):
    from sim.cli import main
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_cli_from_logs_names_the_log_not_the_output_folder(tmp_path, capsys):
    """A log whose scenario does not validate is named by its own path and the scenario's
    field (the copy written into the output's temporary folder was named)."""
    from sim.cli import main
    elog = _log("validate-smoke")
    elog.scenario = copy.deepcopy(elog.scenario)
    next(iter(elog.scenario["pools"].values()))["replicas"] = 0
    (tmp_path / "logs").mkdir()
    elog.write(tmp_path / "logs" / FILE_NAME)
    assert main(["validate", "--from-logs", str(tmp_path / "logs"),
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'logs' / FILE_NAME}: "
                          "scenario.pools.engine.replicas: Input should be greater than 0"), err
    assert ".tmp-" not in err and "scenario-recorded.yaml" not in err
    assert not (tmp_path / "o").exists()


def test_an_engine_log_that_is_a_fifo_is_refused_at_once(tmp_path):
    """A named pipe with no writer: refused without waiting on it (it would block)."""
    import os
    from calibrate.engines.hf.engine_log import EngineLog, EngineLogError
    fifo = tmp_path / "engine_log.json.gz"
    os.mkfifo(fifo)
    with pytest.raises(EngineLogError, match="not a regular file"):
        EngineLog.read(fifo)
