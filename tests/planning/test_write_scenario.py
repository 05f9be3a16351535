"""`fleetsim size` names every option in full (weight and KV precisions, TP, PP, engine,
step-time source) and `--write-scenario FILE` writes the chosen fleet as a scenario that
`fleetsim run` reproduces."""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import yaml

import sim
from sim.cli import main
from sim.config.scenario import Scenario
from sim.config.slos import parse_slo
from sim.planning.options import option_grid, option_values
from sim.planning.write_back import HEADER

from tests.planning.test_planning import chat

SLOS = ["--slo", "ttft_p99=2s", "--slo", "tpot_p99=80ms"]


def fp8_weights_bf16_kv(**sizing) -> dict:
    """The chat scenario with a pool whose KV cache is bf16 and whose sizing tries fp8
    weights only."""
    data = chat(duration=20, rate=6).model_dump(mode="json")
    data["pools"]["p"]["kv_dtype"] = "bf16"
    data["pools"]["p"]["sizing"] = {"weight_dtype": ["fp8"], "max_replicas": 16, **sizing}
    return data


def test_an_fp8_weight_option_keeps_the_pools_kv_cache_precision():
    """fp8 weights once brought an fp8 KV cache with them, unseen: an option now sets the
    KV precision it names, the pool's own unless sizing lists others."""
    scenario = Scenario.model_validate(fp8_weights_bf16_kv())
    (option,) = option_grid(scenario, "p")
    assert option["weight_dtype"] == "fp8" and option["kv_dtype"] == "bf16"
    assert option_values(scenario, "p", option, 2)["pools.p.kv_dtype"] == "bf16"
    both = Scenario.model_validate(fp8_weights_bf16_kv(kv_dtype=["bf16", "fp8"]))
    assert [o["kv_dtype"] for o in option_grid(both, "p")] == ["bf16", "fp8"]


def test_fp8_weights_with_a_bf16_kv_cache_are_sized_and_written_back(tmp_path, capsys):
    """The row names weights fp8 and KV bf16, TP, PP, engine and step-time source, in
    size.csv, size.json and the console; the written scenario holds that fleet (the same
    replicas, hardware, TP, PP and both precisions), and running it gives the SLO
    figures size measured for the option, within the SLOs."""
    src = tmp_path / "s.yaml"
    src.write_text(yaml.safe_dump(fp8_weights_bf16_kv()))
    out, written = tmp_path / "sized", tmp_path / "plans" / "fleet.yaml"
    assert main(["size", str(src), *SLOS, "--quiet", "--out", str(out),
                 "--write-scenario", str(written)]) == 0
    console = capsys.readouterr().out
    rows = pd.DataFrame(json.loads((out / "size.json").read_text()))
    csv = pd.read_csv(out / "size.csv")
    (row,) = rows.to_dict(orient="records")
    for column in ("weight_dtype", "kv_dtype", "tp", "pp", "engine", "cost_model"):
        assert column in csv.columns and column in console.splitlines()[0]
    assert (row["weight_dtype"], row["kv_dtype"], row["engine"]) == ("fp8", "bf16", "vllm")
    assert row["cost_model"] and row["cost_model"] in console
    assert "fp8 weights, bf16 KV cache" in console and str(written) in console

    assert written.read_text().startswith(HEADER)
    fleet = sim.load_scenario(written)
    pool = fleet.pools["p"]
    assert (pool.hardware, pool.tp, pool.pp, pool.weight_dtype, pool.kv_dtype,
            pool.replicas, pool.autoscaler) == (row["hardware"], row["tp"], row["pp"], "fp8",
                                                "bf16", row["replicas"], None)
    run = sim.run(fleet)
    assert run.summary["pools"]["p"]["cost_model"] == row["cost_model"]
    from sim.planning.trial import evaluate
    measured, ok, _ = evaluate(fleet, "p", [parse_slo(s) for s in SLOS[1::2]])
    # (size.json holds 10 decimals)
    assert ok and measured["ttft_p99"] == pytest.approx(row["ttft_p99"], abs=1e-9)
    assert measured["tpot_p99"] == pytest.approx(row["tpot_p99"], abs=1e-9)


def test_an_existing_file_is_replaced_only_with_force_and_only_if_size_wrote_it(tmp_path,
                                                                               capsys):
    """An existing file is refused before any run (exit 2, the path named): a file size
    wrote without --force, a file size did not write even with it, the scenario itself
    always; with --force a file size wrote is replaced."""
    src = tmp_path / "s.yaml"
    src.write_text(yaml.safe_dump(fp8_weights_bf16_kv()))
    ours, mine = tmp_path / "ours.yaml", tmp_path / "mine.yaml"
    mine.write_text("name: mine\n")
    size = ["size", str(src), *SLOS, "--quiet", "--write-scenario"]
    assert main([*size, str(ours)]) == 0
    capsys.readouterr()
    for target, extra, fragment in ((ours, [], "add --force"),
                                    (mine, [], "fleetsim replaces only a file"),
                                    (mine, ["--force"], "fleetsim replaces only a file"),
                                    (src, ["--force"], "one of the command's inputs")):
        assert main([*size, str(target), *extra]) == 2
        err = capsys.readouterr().err
        assert fragment in err and str(target) in err and "Traceback" not in err
    assert mine.read_text() == "name: mine\n"
    ours.write_text(ours.read_text() + "# edited\n")
    assert main([*size, str(ours), "--force"]) == 0
    assert "# edited" not in ours.read_text()


def test_data_paths_are_rewritten_for_the_written_files_folder(tmp_path, capsys):
    """A trace named relative to the scenario's folder is named relative to the written
    file's folder, and the command says which folder to allow when running it."""
    src_dir, plans = tmp_path / "src", tmp_path / "plans"
    src_dir.mkdir()
    (src_dir / "t.csv").write_text("timestamp,prompt_tokens,output_tokens\n" + "".join(
        f"{i * 0.5},{300 + i},{20 + i % 7}\n" for i in range(40)))
    data = fp8_weights_bf16_kv()
    data["workload"]["streams"]["chat"] = {"model": "llama-3.1-8b",
                                          "arrival": {"type": "trace", "path": "t.csv"}}
    (src_dir / "s.yaml").write_text(yaml.safe_dump(data))
    written = plans / "fleet.yaml"
    assert main(["size", str(src_dir / "s.yaml"), *SLOS, "--quiet",
                 "--write-scenario", str(written)]) == 0
    assert f"--allow-path {src_dir.resolve()}" in capsys.readouterr().out
    stream = yaml.safe_load(written.read_text())["workload"]["streams"]["chat"]
    assert stream["arrival"]["path"] == "../src/t.csv"
    fleet = sim.load_scenario(written, allow_paths=[src_dir])
    assert len(sim.run(fleet).requests) == 40


def test_the_autoscalers_and_the_pair_chosen_are_written_back(tmp_path, capsys):
    """--autoscaled writes each pool's chosen target, floor and bound; --joint the pair
    of counts; running either file gives the chosen row's cost per hour. The rows of
    either name each pool's option in full."""
    from tests.planning.test_autoscaled import diurnal
    from tests.planning.test_joint import disaggregated

    for name, data, mode, slo in (
            ("auto", diurnal(), ["--autoscaled"], "ttft_p99=500ms"),
            ("pair", disaggregated(), ["--joint", "prefill,decode"], "ttft_p99=2s")):
        src, written = tmp_path / f"{name}.yaml", tmp_path / f"{name}-fleet.yaml"
        src.write_text(yaml.safe_dump(data.model_dump(mode="json")))
        out = tmp_path / name
        assert main(["size", str(src), "--slo", slo, "--quiet", *mode, "--out", str(out),
                     "--write-scenario", str(written)]) == 0
        (chosen,) = [r for r in json.loads((out / "size.json").read_text()) if r["chosen"]]
        fleet = sim.load_scenario(written)
        summary = sim.run(fleet).summary
        hours = summary["end_s"] / 3600
        if name == "auto":          # each row names the pool's option in full
            assert {k: chosen[k] for k in ("weight_dtype", "kv_dtype", "tp", "pp",
                                           "engine")} == {"weight_dtype": "bf16",
                                                          "kv_dtype": "bf16", "tp": 1,
                                                          "pp": 1, "engine": "vllm"}
            assert chosen["cost_model"]
            scaler = fleet.pools["p"].autoscaler
            assert (scaler.target, scaler.min_replicas, scaler.max_replicas) == (
                chosen["target"], chosen["min_replicas"], chosen["max_replicas"])
            assert summary["pools"]["p"]["cost_usd"] / hours == pytest.approx(
                chosen["cost_usd_per_h"], abs=1e-9)
        else:
            assert all(re.match(r"\S+ tp\d+ pp\d+ \w+/\w+, engine \w+, \S+",
                                chosen[f"option_{p}"]) for p in ("prefill", "decode"))
            assert {p: fleet.pools[p].replicas for p in ("prefill", "decode")} == {
                p: chosen[p] for p in ("prefill", "decode")}
            assert fleet.pools["prefill"].autoscaler is None
            cost = sum(summary["pools"][p]["cost_usd"] for p in ("prefill", "decode"))
            assert cost / hours == pytest.approx(chosen["cost_usd_per_h"], rel=1e-9)
        assert f"wrote {written}" in capsys.readouterr().out


def test_a_scenario_written_inside_out_is_one_of_its_outputs_and_force_replaces_it(
        tmp_path, capsys):
    """--write-scenario DIR/c.yaml beside --out DIR worked once, and the rerun with
    --force was refused ('output folder holds c.yaml, which fleetsim did not write
    there'): the file is now written with the folder, listed by its marker, and the
    rerun replaces both; the data paths it names are relative to its own folder."""
    from sim.output.files.output_names import read_marker

    src = tmp_path / "s.yaml"
    src.write_text(yaml.safe_dump(fp8_weights_bf16_kv()))
    out = tmp_path / "o"
    argv = ["size", str(src), *SLOS, "--quiet", "--out", str(out),
            "--write-scenario", str(out / "plans" / "c.yaml")]
    assert main(argv) == 0
    assert main([*argv, "--force"]) == 0, capsys.readouterr().err
    assert "plans/c.yaml" in read_marker(out)["files"]
    assert f"wrote {out / 'plans' / 'c.yaml'}" in capsys.readouterr().out
    fleet = sim.load_scenario(out / "plans" / "c.yaml")
    assert fleet.pools["p"].weight_dtype == "fp8"


@pytest.mark.parametrize("name", ["chosen.json", "chosen", "chosen.yaml.txt"])
def test_a_scenario_file_not_named_yaml_is_refused_before_any_work(tmp_path, capsys, name):
    """--write-scenario wrote YAML into a file named chosen.json: a name that does not
    end in .yaml or .yml is refused (exit 2, naming --write-scenario), nothing written."""
    src = tmp_path / "s.yaml"
    src.write_text(yaml.safe_dump(fp8_weights_bf16_kv()))
    assert main(["size", str(src), *SLOS, "--quiet",
                 "--write-scenario", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert "--write-scenario" in err and ".yaml or .yml" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
