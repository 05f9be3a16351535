"""`fleetsim size --report`: the options' Pareto views, the cost model of each, and the
chosen fleet's cost per pool and per team, per hour and per day."""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import yaml

import sim
from sim.cli import main
from sim.output.pages import pareto
from sim.output.table import plain_number
from sim.planning.chosen import chosen_fleet, chosen_options

from tests.planning.test_planning import chat


@pytest.fixture(scope="module")
def sized(tmp_path_factory):
    folder = tmp_path_factory.mktemp("size-report")
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(chat(duration=20, rate=6).model_dump(mode="json")))
    out = folder / "sized"
    assert main(["size", str(path), "--slo", "ttft_p99=2s", "--slo", "tpot_p99=80ms",
                 "--quiet", "--out", str(out), "--report"]) == 0
    return path, out


def test_size_report_shows_the_options_and_the_chosen_fleet(sized):
    _, out = sized
    page = (out / "report.html").read_text(encoding="utf-8")
    rows = pd.DataFrame(json.loads((out / "size.json").read_text()))
    assert "Options against each other" in page and page.count("data:image/png") == 1
    assert "Chosen fleet" in page
    for model in rows["cost_model"]:                 # the cost model of every option
        assert model in page
    # the rows' Pareto columns hold what the option measured
    assert (rows["slo_margin_min"] == rows[["margin_ttft_p99", "margin_tpot_p99"]].min(axis=1)).all()
    assert (rows["output_tokens_per_s_per_gpu"] > 0).all() and (rows["tokens_per_s_per_user"] > 0).all()


def test_the_chosen_fleet_is_each_pools_cheapest_feasible_option(sized):
    path, out = sized
    rows = pd.DataFrame(json.loads((out / "size.json").read_text()))
    cheapest = rows[rows["feasible"]].sort_values("cost_usd_per_h").iloc[0]
    assert chosen_options(rows) == {"p": {"hardware": cheapest["hardware"],
                                          "tp": int(cheapest["tp"]),
                                          "pp": int(cheapest["pp"]),
                                          "weight_dtype": cheapest["weight_dtype"],
                                          "kv_dtype": cheapest["kv_dtype"],
                                          "replicas": int(cheapest["replicas"])}}
    scenario, summary = chosen_fleet(sim.load_scenario(path), rows)
    pool = scenario.pools["p"]
    assert (pool.hardware, pool.replicas, pool.autoscaler) == (cheapest["hardware"],
                                                               int(cheapest["replicas"]), None)
    hours = summary["end_s"] / 3600.0
    page = (out / "report.html").read_text(encoding="utf-8")
    for team, figures in summary["teams"].items():   # per team, per hour and per day
        per_h = figures["cost_usd"] / hours
        assert re.search(rf"<td>{team}</td>.*?<td>{plain_number(per_h)}</td>"
                         rf"<td>{plain_number(per_h * 24)}</td>", page)


def test_pareto_views_leave_out_options_without_figures():
    table = pd.DataFrame({"cost_usd_per_h": [1.0, 2.0], "slo_margin_min": [None, None]})
    assert pareto.views(table) == []
    table["slo_margin_min"] = [0.1, None]
    assert [v[0] for v in pareto.views(table)] == ["slo_margin_min"]


@pytest.mark.parametrize("argv, fragment", [
    (["--report"], "give --out DIR"),
    (["--report", "--max-rate", "--out", "X"], "--max-rate searches one fleet's load"),
])
def test_bad_report_arguments_exit_2(argv, fragment, capsys, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(chat(duration=10, rate=2).model_dump(mode="json")))
    argv = [str(tmp_path / "o") if a == "X" else a for a in argv]
    assert main(["size", str(path), "--slo", "ttft_p99=2s", *argv]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
