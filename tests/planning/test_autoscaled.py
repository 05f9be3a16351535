"""`fleetsim size --autoscaled`: a target-tracking autoscaler sized for a time-varying
load finds, per target, the fewest max_replicas a scan finds, picks the cheapest feasible
target, and gives its cost per day by team."""
from __future__ import annotations

import json

import pytest
import yaml

from sim.cli import main
from sim.config.scenario import Scenario
from sim.config.slos import parse_slo
from sim.planning.autoscaled import autoscaled_size, targets_tried
from sim.planning.overrides import with_values
from sim.planning.size import verdict

SLOS = [parse_slo("ttft_p99=500ms"), parse_slo("tpot_p99=40ms")]
CAP = 6


def diurnal() -> Scenario:
    """A sinusoidal load (6 to 26 requests/s over 4 minutes) on an autoscaled pool."""
    return Scenario.model_validate({
        "name": "autoscaled", "seed": 5, "duration": 240, "sample_interval": 5,
        "workload": {"streams": {
            "a": {"team": "alpha", "model": "llama-3.1-8b",
                  "arrival": {"type": "poisson", "rate": {
                      "type": "sinusoidal", "mean": 16, "amplitude": 10, "period": 240}},
                  "prompt_tokens": 1000, "output_tokens": 200},
            "b": {"team": "beta", "model": "llama-3.1-8b",
                  "arrival": {"type": "poisson", "rate": 5},
                  "prompt_tokens": 500, "output_tokens": 100}}},
        "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM", "replicas": 1,
                        "cold_start": {"provisioning": "20s"},
                        "autoscaler": {"type": "target", "metric": "inflight_per_replica",
                                       "target": 64, "min_replicas": 1, "max_replicas": 8,
                                       "stable_window": "20s", "panic_window": "4s",
                                       "scale_down_cooldown": "30s"},
                        "sizing": {"max_replicas": CAP}}},
    })


@pytest.fixture(scope="module")
def sized():
    return autoscaled_size(diurnal(), "p", SLOS)


def test_each_targets_bound_is_the_fewest_a_scan_finds(sized):
    table, _ = sized
    scenario = diurnal()
    assert list(table["target"]) == targets_tried(scenario.pools["p"].autoscaler)
    for _, row in table.iloc[[2, 3]].iterrows():         # the configured target, a higher
        meets = [verdict(with_values(scenario, {"pools.p.autoscaler.target": row["target"],
                                                "pools.p.autoscaler.max_replicas": n}),
                         "p", SLOS, None).ok for n in range(1, CAP + 1)]
        fewest = meets.index(True) + 1 if any(meets) else None
        assert (None if not row["feasible"] else int(row["max_replicas"])) == fewest


def test_the_cheapest_feasible_target_is_chosen_with_its_cost_per_day_and_team(sized):
    table, teams = sized
    feasible = table[table["feasible"]]
    assert len(feasible) >= 2 and not table["feasible"].all()   # the search had a choice
    chosen = table[table["chosen"]].iloc[0]
    assert chosen["cost_usd_per_h"] == feasible["cost_usd_per_h"].min()
    assert chosen["cost_usd_per_day"] == pytest.approx(24 * chosen["cost_usd_per_h"])
    assert chosen["replicas_mean"] < chosen["max_replicas"] or chosen["max_replicas"] == 1
    assert set(teams) == {"alpha", "beta"}
    assert sum(teams.values()) == pytest.approx(chosen["cost_usd_per_day"], rel=1e-9)


def test_size_autoscaled_writes_its_table_and_team_costs(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    scenario = with_values(diurnal(), {"duration": 60.0, "pools.p.sizing.max_replicas": 2})
    path.write_text(yaml.safe_dump(scenario.model_dump(mode="json")))
    code = main(["size", str(path), "--slo", "ttft_p99=2s", "--autoscaled", "--quiet",
                 "--out", str(tmp_path / "o")])
    assert code == 0
    written = json.loads((tmp_path / "o" / "teams.json").read_text())
    assert set(written["cost_usd_per_day_by_team"]["p"]) == {"alpha", "beta"}
    rows = json.loads((tmp_path / "o" / "size.json").read_text())
    assert sum(r["chosen"] for r in rows) == 1
    assert "pool p, chosen autoscaler: cost per day by team: " in capsys.readouterr().out


@pytest.mark.parametrize("extra, fragment", [
    (["--pool", "fixed"], "pool fixed has no target-tracking autoscaler"),
    (["--joint", "p,fixed"], "give one"),
    (["--max-rate"], "--max-rate does not go with --autoscaled"),
])
def test_bad_autoscaled_arguments_exit_2(extra, fragment, tmp_path, capsys):
    data = diurnal().model_dump(mode="json")
    data["pools"]["fixed"] = {"model": "llama-3.1-70b", "hardware": "H100-SXM", "tp": 4}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["size", str(path), "--slo", "ttft_p99=2s", "--autoscaled", *extra]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
