"""`fleetsim size --joint`: two coupled pools sized together find the cheapest pair of an
exhaustive search of the grid, in fewer simulations; pools that are not coupled are
refused."""
from __future__ import annotations

import itertools
import json

import pytest
import yaml

import sim
from sim.cli import main
from sim.config.scenario import Scenario
from sim.config.slos import parse_slo
from sim.planning.joint import coupling, joint_size, pair_cost_per_h
from sim.config.overrides import with_values
from sim.planning.options import configured_option, option_values
from sim.planning.trial import verdict

CAP = 4
# (the prefill pool meets the TTFT bound from 3 replicas, the decode pool the TPOT bound
# from 2, on vllm@async: a one-step-ahead scheduler adds about a prefill step to TTFT)
SLOS = [parse_slo("ttft_p99=800ms"), parse_slo("tpot_p99=12ms")]


def disaggregated(cap: int = CAP, **prices):
    scn = sim.load_scenario("scenarios/disaggregated.yaml")
    values = {"duration": 60.0, "workload.rate_scale": 3.0,
              "pools.prefill.sizing": {"max_replicas": cap},
              "pools.decode.sizing": {"max_replicas": cap}}
    values.update({f"pools.{p}.price_per_gpu_hour": v for p, v in prices.items()})
    return with_values(scn, values)


@pytest.fixture(scope="module")
def grid_ok():
    """Every pair of the 4 x 4 grid simulated (prices do not change a run): those meeting
    the SLOs."""
    scenario = disaggregated()
    fixed = lambda pool, n: option_values(scenario, pool,
                                          configured_option(scenario.pools[pool]), n)
    return [(na, nb) for na, nb in itertools.product(range(1, CAP + 1), repeat=2)
            if verdict(with_values(scenario, {**fixed("prefill", na), **fixed("decode", nb)}),
                       ("prefill", "decode"), SLOS, None).ok]


@pytest.mark.parametrize("prices", [{}, {"prefill": 1.0, "decode": 6.0}])
def test_joint_sizing_finds_the_exhaustive_searchs_cheapest_pair(prices, grid_ok):
    scenario = disaggregated(**prices)
    cost = pair_cost_per_h(scenario, "prefill", "decode")
    expected = min(grid_ok, key=lambda pair: (cost(*pair), pair[0])) if grid_ok else None
    grid = CAP * CAP
    table = joint_size(scenario, ["prefill", "decode"], SLOS)
    chosen = table[table["chosen"]]
    assert expected is not None and len(chosen) == 1
    row = chosen.iloc[0]
    assert (int(row["prefill"]), int(row["decode"])) == expected
    assert row["cost_usd_per_h"] == pytest.approx(pair_cost_per_h(scenario, "prefill", "decode")(*expected))
    assert table["simulations"].iloc[0] < grid        # the staircase, not the grid


def test_joint_sizing_keeps_each_pools_sizing_floor(grid_ok):
    """sizing.min_replicas: 2 on both pools: the cheapest pair of the grid with at least
    two of each, and no pair under the floors tried."""
    floored = with_values(disaggregated(), {"pools.prefill.sizing.min_replicas": 2,
                                            "pools.decode.sizing.min_replicas": 2})
    cost = pair_cost_per_h(floored, "prefill", "decode")
    allowed = [(a, b) for a, b in grid_ok if a >= 2 and b >= 2]
    table = joint_size(floored, ["prefill", "decode"], SLOS)
    assert table["prefill"].min() >= 2
    row = table[table["chosen"]].iloc[0]
    assert (int(row["prefill"]), int(row["decode"])) == \
        min(allowed, key=lambda pair: (cost(*pair), pair[0]))


def test_coupled_pools_are_found_by_their_route():
    scenario = sim.load_scenario("scenarios/disaggregated.yaml")
    assert coupling(scenario, "decode", "prefill") == "disaggregated model chat-split"
    assert coupling(scenario, "prefill", "colocated") is None
    cascade = sim.load_scenario("scenarios/small-large-routing.yaml")
    routes = [(n, m) for n, m in cascade.gateway.models.items()
              if m.cascade is not None or m.by_prompt_length is not None]
    for name, served in routes:
        pair = ((served.cascade.first, served.cascade.then) if served.cascade is not None
                else (served.by_prompt_length.short, served.by_prompt_length.long))
        found = coupling(cascade, *pair)        # both routes couple small and large
        assert found is not None and any(n in found for n, _ in routes)
    assert len(routes) == 2


@pytest.mark.parametrize("joint, fragment", [
    ("prefill,colocated", "are not coupled"),
    ("prefill", "two different pools"),
    ("prefill,prefill", "two different pools"),
    ("prefill,nowhere", "unknown pool 'nowhere'"),
])
def test_a_joint_search_over_pools_that_are_not_coupled_exits_2(joint, fragment, tmp_path,
                                                                  capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(disaggregated().model_dump(mode="json")))
    assert main(["size", str(path), "--slo", "ttft_p99=1s", "--joint", joint,
                 "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "--joint" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_size_joint_writes_its_table(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(disaggregated(cap=2).model_dump(mode="json")))
    assert main(["size", str(path), "--slo", "ttft_p99=2s", "--joint", "prefill,decode",
                 "--out", str(tmp_path / "o"), "--quiet"]) == 0
    rows = json.loads((tmp_path / "o" / "size.json").read_text())
    assert sum(r["chosen"] for r in rows) == 1
    assert "prefill" in capsys.readouterr().out


def by_length(cap: int = 3) -> Scenario:
    """One stream of long-tailed prompts split at a prompt length between two pools of
    the 8B model, the long pool's GPUs dearer."""
    return Scenario.model_validate({
        "name": "split", "seed": 3, "duration": 60, "warmup": 5,
        "workload": {"streams": {"q": {
            "model": "chat", "arrival": {"type": "poisson", "rate": 12},
            "prompt_tokens": {"type": "lognormal", "mean": 2500, "cv": 1.0, "max": 16000},
            "output_tokens": 100}}},
        "gateway": {"models": {"chat": {"by_prompt_length": {
            "threshold_tokens": 2000, "short": "short", "long": "long"}}}},
        "pools": {name: {"model": "llama-3.1-8b", "hardware": "H100-SXM",
                         "price_per_gpu_hour": price, "sizing": {"max_replicas": cap}}
                  for name, price in (("short", 2.0), ("long", 3.0))},
    })


def test_joint_sizing_over_thresholds_answers_as_each_threshold_searched_alone():
    """--thresholds: the staircase at each threshold, the answer the cheapest pair of
    any, exactly as separate searches at each threshold find them. (Both go through the
    same staircase; that the threshold is applied shows in the answer: were it not, the
    three would tie and the first, 1,000, would be chosen.)"""
    scenario = by_length()
    field = "gateway.models.chat.by_prompt_length.threshold_tokens"
    slos = [parse_slo("ttft_p99=1s")]
    cost = pair_cost_per_h(scenario, "short", "long")
    thresholds = [1000, 2000, 6000]
    table = joint_size(scenario, ["short", "long"], slos, thresholds=thresholds)
    best = None
    for threshold in thresholds:
        alone = joint_size(with_values(scenario, {field: threshold}), ["short", "long"], slos)
        mine = table[table["threshold_tokens"] == threshold]
        assert _pairs(mine) == _pairs(alone)
        assert list(mine["ttft_p99"]) == pytest.approx(list(alone["ttft_p99"]), nan_ok=True)
        if alone["chosen"].any():
            row = alone[alone["chosen"]].iloc[0]
            pair = (int(row["short"]), int(row["long"]))
            if best is None or cost(*pair) < cost(*best[1]):
                best = (threshold, pair)
    assert best is not None
    chosen = table[table["chosen"]]
    assert len(chosen) == 1
    row = chosen.iloc[0]
    assert (row["threshold_tokens"], (int(row["short"]), int(row["long"]))) == best
    costs = {t: min((cost(*p) for p, ok in _pairs(table[table["threshold_tokens"] == t])
                     if ok), default=None) for t in thresholds}
    least = min(c for c in costs.values() if c is not None)
    # the earliest of the cheapest (a tie goes to the earlier), and not 1,000: the
    # threshold is applied
    assert row["threshold_tokens"] == min(t for t in thresholds if costs[t] == least)
    assert len(set(costs.values())) > 1, costs


def _pairs(table) -> list[tuple[tuple[int, int | None], bool]]:
    return [((int(r["short"]), None if r["long"] is None or r["long"] != r["long"]
              else int(r["long"])), bool(r["feasible"])) for _, r in table.iterrows()]


@pytest.mark.parametrize("argv, fragment", [
    (["--joint", "prefill,decode", "--thresholds", "1000,2000"], "not by a prompt-length split"),
    (["--thresholds", "1000"], "give --joint SHORT_POOL,LONG_POOL as well"),
    (["--joint", "prefill,decode", "--thresholds", "0,2000"], "must be from 1"),
    (["--joint", "prefill,decode", "--thresholds", "1k"], "--thresholds"),
])
def test_bad_thresholds_exit_2(argv, fragment, tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(disaggregated().model_dump(mode="json")))
    try:
        code = main(["size", str(path), "--slo", "ttft_p99=1s", *argv, "--quiet"])
    except SystemExit as exc:           # argparse's own refusal of a value
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


@pytest.mark.parametrize("thresholds, change, fragment", [
    ([1000, 1000], {}, "lists a threshold twice"),
    ([1000, 20000], {}, "--thresholds: 20,000 tokens: no prompt reaches 20,000 tokens"),
    ([1000], {"gateway.models.other": {"by_prompt_length": {
        "threshold_tokens": 3000, "short": "long", "long": "short"}}},
     "served models chat, other each split prompts between pools short and long"),
    ([1000], {"pools.short.sizing.max_replicas": 400, "pools.long.sizing.max_replicas": 400},
     "this search may run"),
])
def test_thresholds_refused_before_any_run(thresholds, change, fragment, monkeypatch):
    import sim.planning.joint as joint
    monkeypatch.setattr(joint, "verdict", lambda *a, **k: pytest.fail("a run started"))
    with pytest.raises(sim.ScenarioError, match=fragment):
        joint_size(with_values(by_length(), change), ["short", "long"],
                   [parse_slo("ttft_p99=1s")], thresholds=thresholds)
