"""The command line: exit codes, clear errors without tracebacks, outputs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import sim
from sim.cli import main

ROOT = Path(__file__).resolve().parent.parent

GOOD = """\
name: tiny
seed: 1
duration: 20s
workload:
  streams:
    chat:
      model: llama-3.1-8b
      arrival: {type: poisson, rate: 2/s}
      prompt_tokens: {type: uniform, low: 100, high: 400}
      output_tokens: 50
pools:
  main:
    model: llama-3.1-8b
    hardware: H100-SXM
    replicas: 1
    scheduler: {type: continuous}
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def run_cli(*args: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


BAD_CASES = {
    # name: (replacement of a GOOD line, expected line, expected fragments)
    "unknown key": ("    replicas: 1", "    replicsa: 1", 15,
                    ["pools.main.replicsa", "unknown key", "did you mean 'replicas'"]),
    "scheduler type typo": ("    scheduler: {type: continuous}", "    scheduler: {type: continous}",
                            16, ["pools.main.scheduler", "'single', 'static', 'continuous'",
                                 "did you mean 'continuous'"]),
    "wrong unit": ("duration: 20s", "duration: 20 parsecs", 3, ["duration", "parsecs"]),
    "negative rate": ("rate: 2/s", "rate: -2/s", 8, ["workload.streams.chat.arrival", "rate"]),
    "model too large": ("    model: llama-3.1-8b\n    hardware: H100-SXM",
                        "    model: llama-3.1-405b\n    hardware: H100-SXM", 13,
                        ["pools.main.model", "405b", "leaves no room"]),
    "unknown hardware": ("hardware: H100-SXM", "hardware: H101", 14,
                         ["pools.main.hardware", "H100-SXM", "H200"]),
    "tp does not divide heads": ("    replicas: 1", "    replicas: 1\n    tp: 3", 16,
                                 ["pools.main.tp", "valid: 1, 2, 4, 8"]),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_scenario_gives_located_error_and_exit_2(tmp_path, capsys, case):
    """Each bad scenario names file, line and field, lists choices, exits 2."""
    old, new, line, fragments = BAD_CASES[case]
    if case == "model too large":
        text = GOOD.replace("    model: llama-3.1-8b\n    hardware", "    model: llama-3.1-405b\n    hardware")
        text = text.replace("      model: llama-3.1-8b", "      model: llama-3.1-405b")
    else:
        assert old in GOOD
        text = GOOD.replace(old, new, 1)
    path = write(tmp_path, text)
    code = main(["run", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ")
    assert f"{path}:{line}" in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_bad_scenario_in_a_subprocess_prints_no_traceback(tmp_path):
    """The installed entry point exits 2 with one clear line, no traceback."""
    path = write(tmp_path, GOOD.replace("    replicas: 1", "    replicsa: 1"))
    code, out, err = run_cli("run", str(path), "--out", str(tmp_path / "o"))
    assert code == 2
    assert "Traceback" not in err and "replicsa" in err


def test_missing_scenario_file_exits_2(tmp_path, capsys):
    """A path that does not exist is a clear error, not a traceback."""
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err


def test_bad_duration_flag_exits_2(tmp_path, capsys):
    """--duration with a nonsense unit is rejected by the argument parser."""
    with pytest.raises(SystemExit) as exc:
        main(["run", str(write(tmp_path, GOOD)), "--duration", "ten"])
    assert exc.value.code == 2


def test_run_writes_outputs_and_refuses_existing_folder(tmp_path, capsys):
    """`run` writes summary.json and tables; a second run needs --force."""
    path = write(tmp_path, GOOD)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--seed", "5"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seed"] == 5
    assert summary["requests"]["arrived"] == summary["requests"]["completed"] > 0
    for name in ("requests.parquet", "timeseries.csv"):
        assert (out / name).is_file()
    printed = capsys.readouterr().out
    assert "main" in printed and "TTFT" in printed
    assert main(["run", str(path), "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["run", str(path), "--out", str(out), "--force", "--quiet"]) == 0


def test_no_report_writes_the_same_data_files_without_the_page(tmp_path, capsys):
    """`run --no-report` writes the data files a full run writes, byte for byte, and no
    report.html; a later full run may replace its folder. A full run draws no PNGs."""
    path = write(tmp_path, GOOD)
    full, bare = tmp_path / "full", tmp_path / "bare"
    assert main(["run", str(path), "--out", str(full), "--quiet"]) == 0
    assert main(["run", str(path), "--out", str(bare), "--quiet", "--no-report"]) == 0
    names = sorted(p.name for p in bare.iterdir())
    assert names == [".fleetsim-output", "requests.parquet", "scenario.yaml",
                     "summary.json", "timeseries.csv"]
    for name in names[1:]:
        assert (bare / name).read_bytes() == (full / name).read_bytes(), name
    assert (full / "report.html").is_file() and not (full / "plots").exists()
    assert main(["run", str(path), "--out", str(bare), "--quiet", "--force"]) == 0
    assert (bare / "report.html").is_file()


def test_png_draws_the_charts_as_png_files_beside_the_page(tmp_path, capsys):
    """`run --png` adds plots/*.png (matplotlib) to a full run's files, which stay byte
    for byte the same; with --no-report, the PNGs without the page; never with
    --replications (no run folder to draw)."""
    from sim.output.pages.plots import FIGURES
    path = write(tmp_path, GOOD)
    plain, drawn = tmp_path / "plain", tmp_path / "drawn"
    assert main(["run", str(path), "--out", str(plain), "--quiet"]) == 0
    assert main(["run", str(path), "--out", str(drawn), "--quiet", "--png"]) == 0
    assert sorted(p.name for p in (drawn / "plots").iterdir()) == sorted(FIGURES)
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in (drawn / "plots").iterdir())
    for p in plain.iterdir():
        if p.name != ".fleetsim-output":        # (its list of the files written)
            assert (drawn / p.name).read_bytes() == p.read_bytes(), p.name
    only = tmp_path / "only"
    assert main(["run", str(path), "--out", str(only), "--quiet", "--png", "--no-report"]) == 0
    assert (only / "plots").is_dir() and not (only / "report.html").exists()
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--png",
                 "--replications", "2"]) == 2
    assert "--png" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [["--sweep", "sweep.csv"], ["--replications", "2"]],
                         ids=["sweep", "replications"])
def test_no_report_refuses_the_flags_that_need_or_have_no_report(tmp_path, capsys, extra):
    path = write(tmp_path, GOOD)
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--no-report", *extra]) == 2
    err = capsys.readouterr().err
    assert "--no-report" in err and extra[0] in err
    assert not (tmp_path / "o").exists()


def _text(frame, columns):
    """``frame`` with ``columns`` (text: a Parquet file's Categoricals, a CSV's strings
    or, where every cell is empty, NaN) as plain strings, missing as empty."""
    out = frame.copy()
    for c in columns:
        out[c] = out[c].astype(object).where(out[c].notna(), "").astype(str)
    return out


def test_run_writes_the_request_table_once_as_parquet(tmp_path, capsys):
    """A run writes its per-request table as requests.parquet only (a simulated day's
    CSV copy was 307 MB beside 82 MB of Parquet): every request is a row of it."""
    import pandas as pd
    path = write(tmp_path, GOOD)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet", "--no-report"]) == 0
    assert not (out / "requests.csv").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert len(pd.read_parquet(out / "requests.parquet")) == summary["requests"]["arrived"]


def test_csv_adds_the_request_table_as_csv_with_the_same_rows(tmp_path, capsys):
    """`run --csv` writes requests.csv beside requests.parquet: the same rows and
    columns, and the Parquet file byte for byte the one a plain run writes."""
    import pandas as pd
    path = write(tmp_path, GOOD)
    plain, both = tmp_path / "plain", tmp_path / "both"
    assert main(["run", str(path), "--out", str(plain), "--quiet", "--no-report"]) == 0
    assert main(["run", str(path), "--out", str(both), "--quiet", "--no-report",
                 "--csv"]) == 0
    table = pd.read_parquet(both / "requests.parquet")
    csv = pd.read_csv(both / "requests.csv", keep_default_na=False, na_values=[""])
    assert len(csv) == len(table) > 0
    text = [c for c in table.columns if not pd.api.types.is_numeric_dtype(table[c])]
    pd.testing.assert_frame_equal(_text(csv, text), _text(table, text), check_dtype=False)
    assert (both / "requests.parquet").read_bytes() == \
        (plain / "requests.parquet").read_bytes()


def test_no_requests_writes_no_request_table_and_the_same_summary(tmp_path, capsys):
    """`run --no-requests` writes neither requests.parquet nor requests.csv; the summary,
    the time series, the plots and the report are the full run's, byte for byte, and
    compare reads the folder as it reads the full run's."""
    path = write(tmp_path, GOOD)
    full, bare = tmp_path / "full", tmp_path / "bare"
    assert main(["run", str(path), "--out", str(full), "--quiet"]) == 0
    assert main(["run", str(path), "--out", str(bare), "--quiet", "--no-requests"]) == 0
    files = sorted(p.relative_to(full) for p in full.rglob("*") if p.is_file())
    kept = sorted(p.relative_to(bare) for p in bare.rglob("*") if p.is_file())
    assert sorted(set(files) - set(kept)) == [Path("requests.parquet")]
    for name in kept:
        if name.name != ".fleetsim-output":
            assert (bare / name).read_bytes() == (full / name).read_bytes(), name
    assert main(["compare", str(full), str(bare), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and "arrived" in json.dumps(rows)


@pytest.mark.parametrize("extra", [["--no-requests", "--csv"],
                                   ["--no-requests", "--replications", "2"],
                                   ["--csv", "--replications", "2"]],
                         ids=["no-requests-csv", "no-requests-replications",
                              "csv-replications"])
def test_request_table_flags_refuse_what_writes_no_table(tmp_path, capsys, extra):
    path = write(tmp_path, GOOD)
    assert main(["run", str(path), "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err
    assert all(flag in err for flag in extra if flag.startswith("--")), err
    assert not (tmp_path / "o").exists()


def test_the_command_exits_quickly_yet_runs_exit_handlers_and_keeps_its_code():
    """`fleetsim`'s entry point skips the modules' teardown but not what an exit owes the
    outside world: exit handlers run, output is flushed, the exit code is the command's."""
    code = ("import atexit, sys; from sim.cli import entry; "
            "atexit.register(lambda: print('handler ran', flush=True)); "
            "sys.argv = ['fleetsim'] + sys.argv[1:]; entry()")
    ok = subprocess.run([sys.executable, "-c", code, "--version"], capture_output=True,
                        text=True, cwd=ROOT, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines() == [f"fleetsim {sim.__version__}", "handler ran"]
    bad = subprocess.run([sys.executable, "-c", code, "run", "no-such-file.yaml"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and "no-such-file.yaml" in bad.stderr
    assert bad.stdout == "handler ran\n"


def test_same_scenario_and_seed_give_identical_summary_json(tmp_path):
    """Two runs of one scenario and seed write byte-identical summary.json."""
    path = write(tmp_path, GOOD)
    for out in ("a", "b"):
        assert main(["run", str(path), "--out", str(tmp_path / out), "--quiet"]) == 0
    a = (tmp_path / "a" / "summary.json").read_bytes()
    b = (tmp_path / "b" / "summary.json").read_bytes()
    assert a == b


def test_shipped_scenarios_are_valid(capsys):
    """Every scenario under scenarios/ validates."""
    paths = sorted(str(p) for p in (ROOT / "scenarios").glob("*.yaml"))
    assert main(["lint", *paths]) == 0
    assert capsys.readouterr().out.count(": ok") == len(paths)


def test_schema_is_json_schema(capsys):
    """`fleetsim schema` prints a JSON Schema naming the scenario's top-level keys."""
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert {"workload", "pools", "duration"} <= set(schema["properties"])


def test_schema_profile_is_the_calibrated_profiles_json_schema(tmp_path, capsys):
    """`fleetsim schema --profile` prints the calibrated profile's JSON Schema: a shipped
    profile validates against it, one with a misspelt field or a table missing does not;
    --out writes it and replaces only a schema fleetsim wrote."""
    import jsonschema
    import yaml
    assert main(["schema", "--profile"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "Calibrated step-time profile"
    assert {"model", "tables"} <= set(schema["required"])
    shipped = yaml.safe_load((ROOT / "profiles" / "calibrated" / "cpu" / "tiny-llama.yaml")
                             .read_text())
    jsonschema.validate(shipped, schema)
    for bad in ({**shipped, "tp_comm_measure": True},
                {**shipped, "tables": {"dense": shipped["tables"]["dense"]}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    out = tmp_path / "profile.schema.json"
    assert main(["schema", "--profile", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == schema
    assert main(["schema", "--out", str(out)]) == 0          # a schema fleetsim wrote
    (tmp_path / "mine.json").write_text("{}")
    assert main(["schema", "--profile", "--out", str(tmp_path / "mine.json")]) == 2
    assert (tmp_path / "mine.json").read_text() == "{}"


HEAVY_MODULES = ("scipy", "torch", "matplotlib")


@pytest.mark.parametrize("setup", [
    "from sim.cli import build_parser; build_parser()",
    "import sim; sim.run(sim.load_scenario('scenarios/v1-single.yaml'))",
], ids=["parser", "plain-run"])
def test_start_up_and_a_run_load_only_what_they_use(setup):
    """Start-up stays light: neither the command line's parser nor a plain run (no files
    written) imports scipy (planning's statistics), torch (calibration only) or
    matplotlib (only to draw the plots a run writes)."""
    code = f"import sys; {setup}; print(sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


MAX_RATE_SCENARIO = """\
name: max-rate
seed: 3
duration: 30s
workload:
  streams:
    chat:
      model: llama-3.1-8b
      arrival: {type: poisson, rate: 4/s}
      prompt_tokens: 500
      output_tokens: 100
pools:
  main:
    model: llama-3.1-8b
    hardware: H100-SXM
    replicas: 1
"""


def test_size_max_rate_writes_its_answer_to_out(tmp_path, capsys):
    """`size --max-rate --out DIR` writes the rates it prints (it used to write nothing)."""
    path = tmp_path / "s.yaml"
    path.write_text(MAX_RATE_SCENARIO, encoding="utf-8")
    out = tmp_path / "o"
    assert main(["size", str(path), "--max-rate", "--slo", "ttft_p99=500ms",
                 "--out", str(out)]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    written = json.loads((out / "max-rate.json").read_text(encoding="utf-8"))
    assert written == printed
    assert written[0]["pool"] == "main" and written[0]["rate_scale"] > 1.0
    # the base load is about 4 requests a second: the rate found scales it
    assert written[0]["requests_per_s"] == pytest.approx(4 * written[0]["rate_scale"],
                                                         rel=0.2)


@pytest.mark.parametrize("command", ["run", "lint", "schema", "profiles", "scenarios", "import-model",
                                     "size", "sweep", "compare", "check", "calibrate",
                                     "validate"])
def test_every_commands_help_prints(command, capsys):
    """argparse formats help strings with %: a bare % in one crashed `check --help`."""
    from sim.cli import main
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "usage: fleetsim" in out and f"examples:\n  fleetsim {command}" in out


def test_every_example_in_the_help_parses_and_names_files_that_ship():
    """The examples in --help are commands that parse; the shipped scenarios they name
    exist."""
    import shlex

    from sim.cli import EXAMPLES, build_parser
    parser = build_parser()
    assert set(EXAMPLES) == set(parser._subparsers._group_actions[0].choices)
    for command, examples in EXAMPLES.items():
        for example in examples:
            words = shlex.split(example.split(" > ")[0])
            assert words[:2] == ["fleetsim", command]
            parser.parse_args(words[1:])
            for word in words:
                if word.startswith("scenarios/") and "*" not in word:
                    assert (ROOT / word).is_file(), word


def test_scenarios_lists_every_shipped_scenario(capsys):
    from sim.cli import main
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    assert "scenarios/quickstart.yaml" in out and "Two teams share" in out
    for path in (ROOT / "scenarios").glob("*.yaml"):
        assert f"scenarios/{path.name} " in out


def test_file_names_with_control_characters_are_printed_escaped(tmp_path, capsys):
    """A file name from a pull request must not drive the CI log's terminal: lint's ok
    line, run's and check's lines and compare's columns print names escaped."""
    text = (ROOT / "scenarios" / "quickstart.yaml").read_text(encoding="utf-8")
    scenario = tmp_path / "a\x1b[31mRED\x1b[0m.yaml"
    scenario.write_text(text.replace("duration: 5min", "duration: 5s"), encoding="utf-8")
    out = tmp_path / "r\x1b[2J"
    assert main(["lint", str(scenario)]) == 0
    assert main(["run", str(scenario), "--out", str(out)]) == 0
    assert main(["compare", str(out), str(out)]) == 0
    assert main(["check", str(scenario), "--baseline", str(tmp_path / "b.json"),
                 "--slo", "ttft_p99=10s", "--update"]) == 0
    assert main(["check", str(scenario), "--baseline", str(tmp_path / "b.json"),
                 "--slo", "ttft_p99=10s"]) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\\x1b[31mRED" in printed and "\\x1b[2J" in printed


def test_lint_checks_every_file_and_fails_when_any_failed(tmp_path, capsys):
    """A bad file does not hide the others: each is reported (its error, or ok), and the
    exit code is 2 when any failed."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nduration: -1s\n", encoding="utf-8")
    good = ROOT / "scenarios" / "quickstart.yaml"
    assert main(["lint", str(bad), str(good), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert f"{good}: ok" in out
    assert err.count(f"error: {bad}:2: duration") == 2 and "Traceback" not in err
    assert main(["lint", str(good)]) == 0


@pytest.mark.parametrize("given, ok", [("5%", True), ("0.05", True), ("1", True),
                                       ("5", False), ("150%", True), ("2.5", False)])
def test_a_bare_tolerance_above_one_asks_for_a_percent_sign(given, ok):
    """``--tolerance 5`` would be 500% as a fraction: refused, pointing at 5%."""
    import argparse
    from sim.cli.common import tolerance_arg
    if ok:
        assert 0 <= tolerance_arg(given) <= 10
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=f"write {given}% for a percentage"):
            tolerance_arg(given)
