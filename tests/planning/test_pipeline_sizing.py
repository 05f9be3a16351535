"""`fleetsim size` with pipeline stages (``pp``) as a dimension beside hardware, TP and
weight precision: Llama-3.1-405B in bf16 fits no H100 node (tp=8, pp=1) and is sized
on two (tp=8, pp=2)."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from sim.cli import main
from sim.config.scenario import Scenario
from sim.config.slos import parse_slo
from sim.planning.chosen import chosen_options
from sim.planning.options import option_grid
from sim.planning.size import size


def llama_405b(sizing: dict | None = None) -> dict:
    return {
        "name": "405b-stages", "seed": 2, "duration": 20, "drain": 600,
        "workload": {"streams": {"chat": {
            "model": "llama-3.1-405b", "arrival": {"type": "poisson", "rate": 0.5},
            "prompt_tokens": {"type": "uniform", "low": 200, "high": 800},
            "output_tokens": 40}}},
        "pools": {"p": {"model": "llama-3.1-405b", "hardware": "H100-SXM", "tp": 8, "pp": 2,
                        "cost_model": {"type": "roofline"}, "front_end": 0,
                        "sizing": sizing or {"tp": [8], "pp": [1, 2], "max_replicas": 2}}},
    }


def test_size_enumerates_pp_beside_hardware_tp_and_dtype():
    scenario = Scenario.model_validate(llama_405b(
        {"hardware": ["H100-SXM", "H200"], "tp": [4, 8], "pp": [1, 2, 4],
         "weight_dtype": ["bf16", "fp8"]}))
    grid = option_grid(scenario, "p")
    assert len(grid) == 2 * 2 * 3 * 2
    assert {o["pp"] for o in grid} == {1, 2, 4}
    assert {"hardware": "H200", "tp": 4, "pp": 4, "weight_dtype": "fp8",
            "kv_dtype": "bf16"} in grid
    plain = Scenario.model_validate(llama_405b({"tp": [8]}))
    assert option_grid(plain, "p") == [{"hardware": "H100-SXM", "tp": 8, "pp": 2,
                                         "weight_dtype": "bf16", "kv_dtype": "bf16"}]


def test_405b_in_bf16_is_sized_on_two_stages_and_not_one():
    """pp=1 is infeasible (the weights leave no room for a KV cache on one node); pp=2 is
    sized, its GPUs and cost counting 16 GPUs a replica."""
    table = size(Scenario.model_validate(llama_405b()), [parse_slo("ttft_p99=10s")])
    rows = {int(r.pp): r for r in table.itertuples()}
    assert set(rows) == {1, 2} and list(table.columns[:8]) == [
        "pool", "hardware", "tp", "pp", "weight_dtype", "kv_dtype", "engine", "cost_model"]
    one, two = rows[1], rows[2]
    assert not one.feasible and "leaves no room for a KV cache" in one.note
    assert "pp=2 at tp=8 leaves room" in one.note
    assert two.feasible and two.replicas >= 1
    assert two.gpus == 16 * two.replicas
    assert two.cost_usd_per_h == pytest.approx(16 * two.replicas * 2.95, rel=1e-6)
    assert chosen_options(table) == {"p": {"hardware": "H100-SXM", "tp": 8, "pp": 2,
                                           "weight_dtype": "bf16", "kv_dtype": "bf16",
                                           "replicas": int(two.replicas)}}


def test_size_cli_writes_the_pp_column(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(llama_405b({"tp": [8], "pp": [2], "max_replicas": 1})))
    out = tmp_path / "out"
    assert main(["size", str(path), "--slo", "ttft_p99=10s", "--out", str(out)]) == 0
    table = pd.read_csv(out / "size.csv")
    assert table["pp"].tolist() == [2] and table["gpus"].tolist() == [16]
    assert json.loads((out / "size.json").read_text())[0]["pp"] == 2
    capsys.readouterr()


def test_a_sweep_row_without_gpu_hours_counts_every_stage():
    """summary_row's fallback (no GPU-hours in the summary): mean replicas x tp x pp."""
    from sim.planning.sweep import summary_row
    pools = {"a": {"replicas_mean": 3.0, "tp": 2, "pp": 2},
             "b": {"replicas_mean": 1.5, "tp": 4}}
    assert summary_row({"pools": pools, "end_s": 0.0})["gpus_mean"] == 3 * 2 * 2 + 1.5 * 4
