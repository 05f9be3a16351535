"""The Python API a notebook uses: dotted overrides, the planning commands as calls
(size, sweep, compare, check) and Results.write, and every example of
docs/python-api.md run as written."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import sim
from sim.cli import main
from sim.config.overrides import with_values

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "python-api.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"),
                    re.MULTILINE | re.DOTALL)


def quickstart(duration_s: float = 20):
    return sim.with_overrides(sim.load_scenario("scenarios/quickstart.yaml"),
                              duration_s=duration_s)


def test_the_page_has_an_example_of_each_call():
    text = "\n".join(BLOCKS)
    for call in ("sim.with_overrides(", "sim.run(", ".write(", "sim.size(", "sim.sweep(",
                 "sim.compare(", "sim.check("):
        assert call in text, call


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i + 1}" for i in range(len(BLOCKS))])
def test_docs_python_api_example_runs(block, tmp_path, monkeypatch):
    """Each ```python block of docs/python-api.md runs as written, in a fresh folder."""
    monkeypatch.chdir(tmp_path)
    exec(compile(block, str(DOC), "exec"), {"__name__": "__docs__"})


def test_dotted_overrides_set_what_set_sets():
    """set=, keywords and --set's with_values give one scenario; seed= still works."""
    base = quickstart()
    fields = {"pools.main.replicas": 3, "workload.streams.chat.arrival.rate": "4/s"}
    by_set = sim.with_overrides(base, set=fields)
    by_keywords = sim.with_overrides(base, **fields)
    assert by_set.pools["main"].replicas == 3
    assert by_set.workload.streams["chat"].arrival.rate.value == 4.0
    expected = with_values(base, fields).model_dump(mode="json")
    assert by_set.model_dump(mode="json") == expected
    assert by_keywords.model_dump(mode="json") == expected
    both = sim.with_overrides(base, set={"pools.main.replicas": 1}, seed=7)
    assert (both.seed, both.pools["main"].replicas) == (7, 1)
    assert base.pools["main"].replicas == 2          # the original is left as it was


def test_dotted_override_typo_names_the_field_and_says_did_you_mean():
    with pytest.raises(sim.ScenarioError) as caught:
        sim.with_overrides(quickstart(), set={"pools.mian.replicas": 3})
    err = caught.value
    assert err.field == "pools.mian.replicas"
    assert "valid: main" in err.message and "did you mean 'main'" in err.message


def test_dotted_override_bad_value_is_located_at_its_field():
    with pytest.raises(sim.ScenarioError) as caught:
        sim.with_overrides(quickstart(), set={"workload.streams.chat.arrival.rate": "4/parsec"})
    assert caught.value.field == "workload.streams.chat.arrival.rate"
    assert "'/s'" in caught.value.message                  # the units it takes
    with pytest.raises(sim.ScenarioError) as caught:
        sim.with_overrides(quickstart(), **{"pools.main.hardware": "H999"})
    assert caught.value.field == "pools.main.hardware"
    assert "H100-SXM" in caught.value.message              # the known choices


@pytest.mark.parametrize("kwargs, field", [
    ({"seed": 3, "set": {"seed": 4}}, "seed"),
    ({"set": {"pools.main": {"replicas": 1}}, "pools.main.replicas": 2}, "pools.main.replicas"),
    ({"set": ["pools.main.replicas=3"]}, "set"),
])
def test_dotted_overrides_refuse_a_field_given_twice_or_not_a_mapping(kwargs, field):
    with pytest.raises(sim.ScenarioError) as caught:
        sim.with_overrides(quickstart(), **kwargs)
    assert caught.value.field == field


def test_size_returns_the_size_table():
    table = sim.size(quickstart(30), slos={"ttft_p99": "2s", "tpot_p99": "50ms"})
    assert isinstance(table, pd.DataFrame) and len(table) >= 1
    assert {"pool", "hardware", "replicas", "feasible", "cost_usd_per_h"} <= set(table)
    assert table.pool.tolist() == ["main"] * len(table)
    with pytest.raises(sim.ScenarioError) as caught:
        sim.size(quickstart(), slos=["ttft_p99=2s"], pools=["mian"])
    assert caught.value.field == "pools" and "main" in caught.value.message


def test_sweep_returns_a_row_per_point_and_refuses_a_bad_path_before_running():
    table = sim.sweep(quickstart(), vary={"pools.main.replicas": "1..2",
                                          "workload.rate_scale": [0.5, 1]})
    assert isinstance(table, pd.DataFrame) and len(table) == 4
    assert table[["pools.main.replicas", "workload.rate_scale"]].values.tolist() == \
        [[1, 0.5], [1, 1], [2, 0.5], [2, 1]]
    assert "ttft_p99_s" in table and "main.replicas_mean" in table
    with pytest.raises(sim.ScenarioError, match="did you mean 'main'"):
        sim.sweep(quickstart(), vary={"pools.mian.replicas": [1, 2]})


def test_compare_takes_results_scenarios_and_result_folders(tmp_path):
    base = quickstart()
    ran = sim.run(base)
    ran.write(tmp_path / "ran", report=False)
    bigger = sim.with_overrides(base, set={"pools.main.replicas": 3})
    table = sim.compare([ran, bigger, tmp_path / "ran"])
    # two runs share the scenario's name: every column is numbered by position
    assert list(table.columns[:4]) == ["figure", "1: quickstart", "2: quickstart", "3: ran"]
    row = table.set_index("figure").loc["ttft_p99_s"]
    assert row["3: ran"] == row["1: quickstart"]            # the folder is that run
    assert row["2: quickstart vs 1: quickstart"] == "better"
    with pytest.raises(sim.ScenarioError):
        sim.compare([ran])


def test_check_returns_its_verdicts_and_fails_when_load_rises(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = "scenarios/quickstart.yaml"
    wrote = sim.check([path], "baseline.json", update=True, set={"duration": "20s"})
    assert wrote.ok and (tmp_path / "baseline.json").is_file()
    same = sim.check([path], "baseline.json", set={"duration": "20s"})
    assert isinstance(same, sim.workflows.CheckResult) and same.ok
    assert same.table().to_dict("records") == [{"scenario": path, "ok": True,
                                                "problems": ""}]
    risen = sim.check([path], "baseline.json",
                      set={"duration": "20s", "workload.rate_scale": 4})
    assert not risen.ok and "--set differs" in risen.verdicts[0].problems[0]
    with pytest.raises(sim.ScenarioError) as caught:
        sim.check([path], "baseline.json", tolerance=5.5e9)
    assert caught.value.field == "tolerance"


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_results_write_writes_the_files_fleetsim_run_writes(tmp_path):
    assert main(["run", "scenarios/quickstart.yaml", "--duration", "20s", "--quiet",
                 "--out", str(tmp_path / "cli")]) == 0
    written = sim.run(quickstart()).write(tmp_path / "api")
    cli, api = _files(tmp_path / "cli"), _files(tmp_path / "api")
    assert sorted(cli) == sorted(api) and "report.html" in api and "summary.json" in api
    assert sorted(p.relative_to(tmp_path / "api").as_posix() for p in written) == \
        sorted(n for n in api if n != ".fleetsim-output")
    for name in ("summary.json", "timeseries.csv", "scenario.yaml", "requests.parquet"):
        assert cli[name] == api[name], name
    # --csv and --no-requests as keywords
    assert main(["run", "scenarios/quickstart.yaml", "--duration", "20s", "--quiet", "--csv",
                 "--out", str(tmp_path / "cli-csv")]) == 0
    sim.run(quickstart()).write(tmp_path / "api-csv", csv=True, report=False)
    assert _files(tmp_path / "cli-csv")["requests.csv"] == \
        _files(tmp_path / "api-csv")["requests.csv"]
    sim.run(quickstart()).write(tmp_path / "none", requests=False, report=False)
    assert not any(n.startswith("requests.") for n in _files(tmp_path / "none"))
    # --png as a keyword: the PNGs as the command line draws them
    assert not any(n.startswith("plots/") for n in api)
    assert main(["run", "scenarios/quickstart.yaml", "--duration", "20s", "--quiet", "--png",
                 "--no-report", "--out", str(tmp_path / "cli-png")]) == 0
    sim.run(quickstart()).write(tmp_path / "api-png", png=True, report=False)
    cli_png, api_png = _files(tmp_path / "cli-png"), _files(tmp_path / "api-png")
    assert {n: b for n, b in cli_png.items() if n.startswith("plots/")} == \
        {n: b for n, b in api_png.items() if n.startswith("plots/")} != {}


def test_results_write_refuses_a_folder_fleetsim_did_not_write(tmp_path):
    results = sim.run(quickstart(10))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(sim.ScenarioError, match="did not write it"):
        results.write(mine, force=True, report=False)
    assert (mine / "notes.txt").read_text() == "keep me"
    results.write(tmp_path / "ours", report=False)
    with pytest.raises(sim.ScenarioError, match="exists"):
        results.write(tmp_path / "ours", report=False)
    results.write(tmp_path / "ours", force=True, report=False)
