"""`fleetsim size --autoscaled`: a target-tracking autoscaler sized for a time-varying
load finds, per target, the lowest floor and the fewest max_replicas a scan finds, picks
the cheapest feasible target, and gives its cost per day by team."""
from __future__ import annotations

import json

import pytest
import yaml

from sim.cli import main
from sim.config.scenario import Scenario
from sim.config.slos import parse_slo
from sim.config.errors import ScenarioError
from sim.planning.autoscaled import autoscaled_size, bounds_values, lowest_floor, targets_tried
from sim.config.overrides import with_values
from sim.planning.trial import verdict

# (200 ms: on vllm@async one warm replica meets 500 ms at every target tried)
SLOS = [parse_slo("ttft_p99=200ms"), parse_slo("tpot_p99=40ms")]
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


def _meets(scenario: Scenario, target: float, floor: int, bound: int) -> bool:
    return verdict(with_values(scenario, bounds_values(scenario, "p", target, floor, bound)),
                   "p", SLOS, None).ok


def test_a_trial_starts_within_its_floor_and_bound_and_drops_a_zero_grace():
    """The configured replicas (1 here) held within [floor, bound]; a scale-to-zero
    pool's grace dropped for a floor above 0 (it applies only at 0), kept at 0."""
    scenario = diurnal()
    assert bounds_values(scenario, "p", 64, 2, 4)["pools.p.replicas"] == 2
    started = with_values(scenario, {"pools.p.replicas": 5})
    assert bounds_values(started, "p", 64, 1, 3)["pools.p.replicas"] == 3
    assert bounds_values(started, "p", 64, 1, 6)["pools.p.replicas"] == 5
    to_zero = with_values(scenario, {"pools.p.autoscaler.min_replicas": 0,
                                     "pools.p.autoscaler.scale_to_zero_grace": 90.0})
    assert lowest_floor(to_zero, "p") == 0
    assert bounds_values(to_zero, "p", 64, 0, 3)["pools.p.replicas"] == 1
    for floor in (0, 2):
        trial = with_values(to_zero, bounds_values(to_zero, "p", 64, floor, 3))
        scaler = trial.pools["p"].autoscaler
        assert (scaler.min_replicas, scaler.scale_to_zero_grace) == \
            (floor, 90.0 if floor == 0 else 30.0)
    kept = with_values(to_zero, {"pools.p.sizing.min_replicas": 2})
    assert lowest_floor(kept, "p") == 2 and lowest_floor(scenario, "p") == 1


def test_an_autoscaled_search_past_the_budget_is_refused_before_any_run():
    big = with_values(diurnal(), {"pools.p.sizing.max_replicas": 20_000})
    with pytest.raises(ScenarioError, match="this search may run .* simulations"):
        autoscaled_size(big, "p", SLOS)


def test_each_targets_floor_and_bound_are_the_fewest_a_scan_finds(sized):
    """Per target: the lowest floor meeting the SLOs with the bound at the cap, then the
    fewest max_replicas with that floor, each as a scan of every count finds it."""
    table, _ = sized
    scenario = diurnal()
    assert list(table["target"]) == targets_tried(scenario.pools["p"].autoscaler)
    for _, row in table.iloc[[2, 3]].iterrows():         # the configured target, a higher
        floors = [_meets(scenario, row["target"], f, CAP) for f in range(1, CAP + 1)]
        floor = floors.index(True) + 1 if any(floors) else None
        assert (None if not row["feasible"] else int(row["min_replicas"])) == floor
        if floor is None:
            continue
        bounds = [_meets(scenario, row["target"], floor, m) for m in range(floor, CAP + 1)]
        assert int(row["max_replicas"]) == bounds.index(True) + floor


def test_a_higher_floor_rescues_a_target_that_reacts_too_late(sized):
    """At twice the configured target the pool scales up too late for the burst with one
    warm replica, whatever its bound; keeping two warm meets the SLOs."""
    table, _ = sized
    scenario = diurnal()
    late = table[table["target"] == 2 * scenario.pools["p"].autoscaler.target].iloc[0]
    assert late["feasible"] and late["min_replicas"] == 2
    assert not _meets(scenario, late["target"], 1, CAP)


def test_the_configured_floor_is_lowered_to_the_cheapest_that_meets_the_slos():
    """A floor of 3 configured: the search goes down to the lowest that meets the SLOs
    (the sizing floor, 1, here) and the day costs less than at the configured floor;
    sizing.min_replicas: 2 keeps at least 2 (for redundancy)."""
    scenario = with_values(diurnal(), {"duration": 120.0,
                                       "pools.p.autoscaler.min_replicas": 3,
                                       "pools.p.autoscaler.target": 48.0})
    table, _ = autoscaled_size(scenario, "p", SLOS)
    row = table[table["target"] == 48.0].iloc[0]
    assert row["feasible"] and row["min_replicas"] == 1
    at_three = verdict(with_values(scenario, {"pools.p.autoscaler.max_replicas":
                                              max(3, int(row["max_replicas"]))}),
                       "p", SLOS, None)
    assert at_three.ok
    assert row["cost_usd_per_h"] < at_three.first.summary["pools"]["p"]["cost_usd"] / (
        at_three.first.summary["end_s"] / 3600.0)
    kept = with_values(scenario, {"pools.p.sizing.min_replicas": 2})
    table, _ = autoscaled_size(kept, "p", SLOS)
    assert table["feasible"].any()
    assert (table.loc[table["feasible"], "min_replicas"] >= 2).all()
    assert table.loc[table["target"] == 48.0, "min_replicas"].iloc[0] == 2


def test_the_cheapest_feasible_target_is_chosen_with_its_cost_per_day_and_team(sized):
    table, teams = sized
    feasible = table[table["feasible"]]
    assert feasible["cost_usd_per_h"].nunique() >= 2           # the search had a choice
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


def test_every_pools_autoscaled_search_is_refused_before_any_pools_run(tmp_path, capsys,
                                                                       monkeypatch):
    """Two autoscaled pools, the second's search past the budget: refused before the
    first pool's search runs (it was refused only once the first had been searched)."""
    import sim.planning.autoscaled as autoscaled

    def ran(*args, **kwargs):
        raise AssertionError("a search ran before every pool's was checked")

    monkeypatch.setattr(autoscaled, "autoscaled_size", ran)
    data = diurnal().model_dump(mode="json")
    data["pools"]["q"] = {**data["pools"]["p"], "sizing": {"max_replicas": 15_000}}
    for stream in data["workload"]["streams"].values():
        stream["pool"] = "p"
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["size", str(path), "--autoscaled", "--slo", "ttft_p99=500ms",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "pools.q.sizing" in err and "simulations" in err


def test_targets_searched_side_by_side_give_the_same_table():
    """--workers: each target's search in its own process gives the table of one process,
    row for row (trials that miss for good are given up in both alike)."""
    import pandas as pd
    short = with_values(diurnal(), {"duration": 90.0, "pools.p.sizing.max_replicas": 3})
    table, teams = autoscaled_size(short, "p", SLOS)
    side, side_teams = autoscaled_size(short, "p", SLOS, workers=2)
    pd.testing.assert_frame_equal(side, table)
    assert side_teams == teams


def test_size_autoscaled_takes_workers(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    scenario = with_values(diurnal(), {"duration": 60.0, "pools.p.sizing.max_replicas": 2})
    path.write_text(yaml.safe_dump(scenario.model_dump(mode="json")))
    outs = []
    for workers in ("1", "2"):
        code = main(["size", str(path), "--slo", "ttft_p99=2s", "--autoscaled", "--quiet",
                     "--workers", workers, "--out", str(tmp_path / f"o{workers}")])
        assert code == 0
        outs.append((tmp_path / f"o{workers}" / "size.json").read_text())
    assert outs[0] == outs[1]
