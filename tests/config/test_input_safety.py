"""Nothing a user types may make fleetsim read a file it should not, hang on one, or
print a file's content.

Data files named by a scenario lie in its folder or the shipped data unless
``--allow-path`` allows another folder; every input is a regular file; errors
name the file, line and field, never what the file holds; names are printable
and bounded; CSV cells cannot start a spreadsheet formula.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sim.cli import main
from sim.output.files.outputs import csv_safe

SECRET = "SECRET-MARKER-7f3a"
TRACE = "timestamp,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n"


def scenario_text(*, arrival: str = "{type: poisson, rate: 2/s}", team: str = "search",
                  stream: str = "chat", lengths: bool = True, name: str = "safety") -> str:
    lines = [f"name: {name}", "seed: 1", "duration: 5s", "workload:", "  streams:",
             f"    {stream}:", f"      team: {team}", "      model: llama-3.1-8b",
             f"      arrival: {arrival}"]
    if lengths:
        lines += ["      prompt_tokens: 20", "      output_tokens: 5"]
    lines += ["pools:", "  main: {model: llama-3.1-8b, hardware: H100-SXM, replicas: 1}"]
    return "\n".join(lines) + "\n"


def write_scenario(folder: Path, text: str, name: str = "s.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def secret_file(folder: Path, name: str = "secret.csv") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"{SECRET}:x:0:0\nroot:{SECRET}\n", encoding="utf-8")
    return path


def cli(args: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out + out.err


def fleetsim(args: list[str], cwd: Path, timeout: float = 30) -> subprocess.CompletedProcess:
    """The CLI in a child process, so that a hang fails the test instead of stalling it."""
    return subprocess.run([sys.executable, "-m", "sim", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


# -- where data files may live -------------------------------------------------------------

def test_trace_outside_the_scenario_folder_is_refused_without_its_content(tmp_path, capsys):
    secret = secret_file(tmp_path / "private")
    scenario = write_scenario(tmp_path / "scen", scenario_text(
        arrival=f"{{type: trace, path: {secret}}}", lengths=False))
    code, text = cli(["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet"], capsys)
    assert code == 2
    assert SECRET not in text
    assert f"{scenario}:9: workload.streams.chat.arrival.path: " in text
    assert "outside the scenario's folder" in text and "--allow-path" in text
    assert not (tmp_path / "out").exists()


def test_etc_passwd_as_a_trace_prints_none_of_it(tmp_path, capsys):
    passwd = Path("/etc/passwd")
    if not passwd.is_file():
        pytest.skip("no /etc/passwd here")
    first = passwd.read_text(errors="replace").splitlines()[0]
    scenario = write_scenario(tmp_path, scenario_text(
        arrival="{type: trace, path: /etc/passwd}", lengths=False))
    code, text = cli(["run", str(scenario), "--out", str(tmp_path / "o"), "--quiet"], capsys)
    assert code == 2 and first not in text
    code, text = cli(["run", str(scenario), "--out", str(tmp_path / "o"), "--quiet",
                      "--allow-path", "/etc"], capsys)
    assert code == 2 and first not in text        # read, but it is no trace: no content shown
    assert text.startswith("error: /etc/passwd")


def test_allow_path_lets_a_trace_outside_be_read(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "t.csv").write_text(TRACE)
    scenario = write_scenario(tmp_path / "scen", scenario_text(
        arrival=f"{{type: trace, path: {data / 't.csv'}}}", lengths=False))
    out = tmp_path / "out"
    code, text = cli(["run", str(scenario), "--out", str(out), "--quiet",
                      "--allow-path", str(data)], capsys)
    assert code == 0, text
    assert len(pd.read_parquet(out / "requests.parquet")) == 2


def test_a_link_in_the_scenario_folder_to_a_file_outside_is_refused(tmp_path, capsys):
    secret = secret_file(tmp_path / "private")
    folder = tmp_path / "scen"
    scenario = write_scenario(folder, scenario_text(arrival="{type: trace, path: t.csv}",
                                                    lengths=False))
    (folder / "t.csv").symlink_to(secret)
    code, text = cli(["run", str(scenario), "--out", str(tmp_path / "o"), "--quiet"], capsys)
    assert code == 2 and SECRET not in text
    assert "it leads to" in text and str(secret) in text


def test_dot_dot_out_of_the_scenario_folder_is_refused(tmp_path, capsys):
    secret_file(tmp_path)
    scenario = write_scenario(tmp_path / "scen", scenario_text(
        arrival="{type: trace, path: ../secret.csv}", lengths=False))
    code, text = cli(["lint", str(scenario)], capsys)
    assert code == 2 and SECRET not in text and "outside the scenario's folder" in text


def test_a_set_or_vary_cannot_point_a_trace_outside(tmp_path, capsys):
    secret = secret_file(tmp_path / "private")
    folder = tmp_path / "scen"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "t.csv").write_text(TRACE)
    scenario = write_scenario(folder, scenario_text(arrival="{type: trace, path: data/t.csv}",
                                                    lengths=False))
    code, text = cli(["run", str(scenario), "--out", str(tmp_path / "o"), "--quiet", "--set",
                      f"workload.streams.chat.arrival.path={secret}"], capsys)
    assert code == 2 and SECRET not in text and "outside the scenario's folder" in text
    code, text = cli(["sweep", str(scenario), "--out", str(tmp_path / "sw.csv"), "--quiet",
                      "--vary", f"workload.streams.chat.arrival.path=data/t.csv,{secret}"],
                     capsys)
    assert code == 2 and SECRET not in text


def test_empirical_lengths_and_profiles_outside_are_refused(tmp_path, capsys):
    secret = secret_file(tmp_path / "private")
    text = scenario_text().replace(
        "      output_tokens: 5",
        f"      output_tokens: {{type: empirical, path: {secret}, column: n}}")
    scenario = write_scenario(tmp_path / "a", text)
    code, out = cli(["lint", str(scenario)], capsys)
    assert code == 2 and SECRET not in out
    assert "workload.streams.chat.output_tokens.path: length file" in out
    profile = scenario_text().replace(
        "replicas: 1}", f"replicas: 1, cost_model: {{type: calibrated, profile: {secret}}}}}")
    scenario = write_scenario(tmp_path / "b", profile)
    code, out = cli(["lint", str(scenario)], capsys)
    assert code == 2 and SECRET not in out
    assert "pools.main.cost_model.profile: calibrated profile" in out
    assert "outside the scenario's folder" in out


# -- what an input may be -------------------------------------------------------------------

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_as_trace_or_scenario_fails_at_once(tmp_path):
    os.mkfifo(tmp_path / "pipe.csv")
    os.mkfifo(tmp_path / "pipe.yaml")
    write_scenario(tmp_path, scenario_text(arrival="{type: trace, path: pipe.csv}",
                                           lengths=False))
    for scenario in ("s.yaml", "pipe.yaml"):
        done = fleetsim(["run", scenario, "--out", "o", "--quiet"], tmp_path)
        assert done.returncode == 2, done.stderr
        assert "not a regular file" in done.stderr


def test_a_fifo_as_a_sweep_table_or_page_fails_at_once(tmp_path):
    """An output path that is a FIFO is refused before anything opens it (opening it would
    wait for a reader forever)."""
    os.mkfifo(tmp_path / "ff.csv")
    os.mkfifo(tmp_path / "ff.html")
    write_scenario(tmp_path, scenario_text())
    for extra in (["--out", "ff.csv"], ["--out", "t.csv", "--report", "ff.html"]):
        done = fleetsim(["sweep", "s.yaml", "--vary", "seed=1,2", "--quiet", *extra], tmp_path)
        assert done.returncode == 2, done.stderr
        assert "not a regular file" in done.stderr and "Traceback" not in done.stderr


def test_a_loop_of_links_as_a_trace_is_named_as_one(tmp_path):
    (tmp_path / "t.csv").symlink_to("t.csv")
    write_scenario(tmp_path, scenario_text(arrival="{type: trace, path: t.csv}",
                                           lengths=False))
    done = fleetsim(["lint", "s.yaml"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "is a loop of symbolic links" in done.stderr and "outside" not in done.stderr


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_dev_zero_as_scenario_or_baseline_fails_at_once(tmp_path):
    done = fleetsim(["run", "/dev/zero", "--out", "o"], tmp_path)
    assert done.returncode == 2 and "not a regular file" in done.stderr
    scenario = write_scenario(tmp_path, scenario_text())
    done = fleetsim(["check", str(scenario), "--baseline", "/dev/zero"], tmp_path)
    assert done.returncode == 2 and "--baseline: " in done.stderr


def test_a_folder_as_trace_is_a_located_error(tmp_path, capsys):
    (tmp_path / "traces").mkdir()
    scenario = write_scenario(tmp_path, scenario_text(arrival="{type: trace, path: traces}",
                                                      lengths=False))
    code, text = cli(["run", str(scenario), "--out", str(tmp_path / "o"), "--quiet"], capsys)
    assert code == 2
    assert f"{scenario}:9: workload.streams.chat.arrival.path: " in text
    assert "is a folder, not a file" in text


def test_a_binary_scenario_is_refused_without_echoing_bytes(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"\x7fELF\x02\x01" + SECRET.encode() + b"\xff\xfe\x00" * 10)
    code, text = cli(["run", str(path), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and SECRET not in text and "ELF" not in text
    assert "not valid UTF-8" in text


def test_a_yaml_syntax_error_does_not_echo_the_secret_line(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: x\npassword: [{SECRET}\nother: 1\n")
    code, text = cli(["lint", str(path)], capsys)
    assert code == 2 and SECRET not in text
    assert f"{path}:" in text and "invalid YAML" in text
    path.write_text(f"name: x\nkey: *{SECRET}\n")
    code, text = cli(["lint", str(path)], capsys)
    assert code == 2 and SECRET not in text


def test_a_yaml_file_that_is_no_scenario_names_none_of_its_keys(tmp_path, capsys):
    path = tmp_path / "creds.yaml"
    path.write_text(f"{SECRET}: 1\naws_secret_access_key: {SECRET}\n")
    code, text = cli(["lint", str(path)], capsys)
    assert code == 2 and SECRET not in text and "aws_secret" not in text
    assert "not a scenario" in text


def test_a_baseline_that_is_not_one_is_a_located_error(tmp_path, capsys):
    scenario = write_scenario(tmp_path, scenario_text())
    for name, content in (("text", f"{SECRET}\n"), ("json", f'["{SECRET}"]'),
                          ("shape", f'{{"s": {{"latency_s": {{"x": "{SECRET}"}}}}}}')):
        baseline = tmp_path / f"{name}.json"
        baseline.write_text(content)
        code, text = cli(["check", str(scenario), "--baseline", str(baseline)], capsys)
        assert code == 2, text
        assert text.startswith(f"error: {baseline}") and "--baseline: " in text
        assert SECRET not in text
    code, text = cli(["check", str(scenario), "--baseline", str(tmp_path)], capsys)
    assert code == 2 and "is a folder" in text


def test_a_sweep_table_that_is_no_table_is_a_located_error(tmp_path, capsys):
    scenario = write_scenario(tmp_path, scenario_text())
    (tmp_path / "sweep.csv").write_bytes(b"\xff\xfe" + SECRET.encode())
    code, text = cli(["run", str(scenario), "--out", str(tmp_path / "o"), "--quiet",
                      "--sweep", str(tmp_path / "sweep.csv")], capsys)
    assert code == 2 and SECRET not in text and "--sweep" in text


# -- names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("where, value, field", [
    ("team", '"a\\0b"', "workload.streams.chat.team"),
    ("team", '"\\e[31mred"', "workload.streams.chat.team"),
    ("team", '"two\\nlines"', "workload.streams.chat.team"),
    ("team", "x" * 10_000, "workload.streams.chat.team"),
    ("stream", '"s\\x01"', "workload.streams.'s\\x01'"),
    ("name", '"run\\u202e"', "name"),
])
def test_names_must_be_printable_and_short(tmp_path, capsys, where, value, field):
    scenario = write_scenario(tmp_path, scenario_text(**{where: value}))
    code, text = cli(["lint", str(scenario)], capsys)
    assert code == 2
    assert f": {field}: " in text, text
    assert "printable" in text or "at most 128 characters" in text
    assert "\x00" not in text and "\x1b" not in text and "x" * 100 not in text


def test_shipped_names_stay_valid(capsys):
    shipped = sorted(Path(__file__).resolve().parents[2].glob("scenarios/*.yaml"))
    assert shipped
    code, text = cli(["lint", *map(str, shipped)], capsys)
    assert code == 0, text


# -- CSV outputs --------------------------------------------------------------------------------

def test_a_formula_team_name_is_quoted_in_requests_csv(tmp_path, capsys):
    scenario = write_scenario(tmp_path, scenario_text(team="'=HYPERLINK(\"x\")'"))
    out = tmp_path / "out"
    code, text = cli(["run", str(scenario), "--out", str(out), "--quiet", "--csv"], capsys)
    assert code == 0, text
    csv = pd.read_csv(out / "requests.csv")
    assert set(csv["team"]) == {"'=HYPERLINK(\"x\")"}
    assert set(pd.read_parquet(out / "requests.parquet")["team"]) == {"=HYPERLINK(\"x\")"}


def test_csv_safe_quotes_text_cells_only():
    frame = pd.DataFrame({"name": ["=1+1", "+x", "-y", "@z", "\tt", "\rr", "ok", None],
                          "cat": pd.Categorical(["=a", "b"] * 4),
                          "number": [-1.0, 2, 3, 4, 5, 6, 7, 8]})
    safe = csv_safe(frame)
    assert list(safe["name"])[:7] == ["'=1+1", "'+x", "'-y", "'@z", "'\tt", "'\rr", "ok"]
    assert pd.isna(safe["name"].iloc[7])
    assert list(safe["cat"])[:2] == ["'=a", "b"]
    assert list(safe["number"]) == list(frame["number"])
    assert frame["name"].iloc[0] == "=1+1"          # the caller's frame is left alone
