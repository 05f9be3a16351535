"""``fleetsim import-model``: a Hugging Face config.json becomes a model profile."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sim.cli import main

ROOT = Path(__file__).resolve().parents[2]

LLAMA_31_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
               "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
               "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
               "max_position_embeddings": 131072, "tie_word_embeddings": False,
               "_name_or_path": "meta-llama/Llama-3.1-8B"}
MIXTRAL_8X7B = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000,
                "max_position_embeddings": 32768, "num_local_experts": 8,
                "num_experts_per_tok": 2}

QWEN15_MOE = {"model_type": "qwen2_moe", "num_hidden_layers": 24, "hidden_size": 2048,
              "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 5632,
              "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
              "num_experts": 60, "num_experts_per_tok": 4, "vocab_size": 151936}
GEMMA_7B = {"model_type": "gemma", "num_hidden_layers": 28, "hidden_size": 3072,
            "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
            "intermediate_size": 24576, "vocab_size": 256000,
            "_name_or_path": "google/gemma-7b"}


def run(tmp_path, config: dict, *args: str) -> int:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    try:
        return main(["import-model", str(path), *args])
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("config, shipped, name", [(LLAMA_31_8B, "llama-3.1-8b", None),
                                                   (MIXTRAL_8X7B, "mixtral-8x7b",
                                                    "mixtral-8x7b")])
def test_the_shipped_profiles_come_back_from_their_configs(tmp_path, capsys, config,
                                                           shipped, name):
    assert run(tmp_path, config, *(["--name", name] if name else [])) == 0
    got = yaml.safe_load(capsys.readouterr().out)
    want = yaml.safe_load((ROOT / "profiles" / "models" / f"{shipped}.yaml").read_text())
    assert got == want


def test_moe_sizes_gqa_and_a_head_size_from_hidden_over_heads(tmp_path, capsys):
    config = {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
              "moe_intermediate_size": 1408, "num_attention_heads": 16,
              "num_key_value_heads": 16, "num_hidden_layers": 24, "vocab_size": 151936,
              "num_experts": 60, "num_experts_per_tok": 4, "tie_word_embeddings": True,
              "max_position_embeddings": 8192}
    assert run(tmp_path, config, "--name", "qwen-moe") == 0
    got = yaml.safe_load(capsys.readouterr().out)
    assert got["head_dim"] == 128 and got["ffn_size"] == 1408
    assert got["num_experts"] == 60 and got["experts_per_token"] == 4
    assert got["tied_embeddings"] is True and got["name"] == "qwen-moe"


@pytest.mark.parametrize("config, fragments", [
    ({"model_type": "rwkv"}, ["model_type 'rwkv' is not one fleetsim reads", "llama",
                              "mixtral"]),
    ({"model_type": "mixtral", "hidden_size": 4096},
     ["missing field(s) num_hidden_layers", "num_local_experts", "num_experts_per_tok"]),
    ({**LLAMA_31_8B, "num_attention_heads": 0}, ["not a whole multiple of num_attention_heads"]),
    ({**LLAMA_31_8B, "num_hidden_layers": -1}, ["num_hidden_layers: ", "greater than 0"]),
    ([1, 2], ["the top level must be an object"]),
    ({**LLAMA_31_8B, "model_type": ["llama"]}, ["model_type of type list is not one"]),
    ({**LLAMA_31_8B, "model_type": {"a": 1}}, ["model_type of type dict is not one"]),
    ({**LLAMA_31_8B, "tie_word_embeddings": "false"},
     ["tie_word_embeddings: expected true or false, got a str"]),
    ({**LLAMA_31_8B, "num_key_value_heads": 0}, ["num_key_value_heads: "]),
    ({**LLAMA_31_8B, "hidden_size": 4096.0}, ["hidden_size: expected a whole number, got a "
                                              "float"]),
    ({**LLAMA_31_8B, "num_hidden_layers": True}, ["num_hidden_layers: expected a whole "
                                                  "number, got a bool"]),
    ({**MIXTRAL_8X7B, "num_experts_per_tok": 9}, ["the config's fields do not make a model",
                                                  "experts"]),
    # Qwen1.5-MoE's shared expert runs for every token: read without it, 40% of each
    # token's work would be missing
    (QWEN15_MOE, ["shared_expert_intermediate_size: the config has a shared expert",
                  "does not model"]),
    ({**QWEN15_MOE, "shared_expert_intermediate_size": 0, "mlp_only_layers": [0, 1]},
     ["mlp_only_layers: the config has layers with a dense MLP"]),
])
def test_a_config_fleetsim_cannot_read_is_a_located_error(tmp_path, capsys, config, fragments):
    assert run(tmp_path, config) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'config.json'}") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err


def test_out_writes_a_profile_a_scenario_can_use_and_replaces_only_its_own(tmp_path, capsys):
    out = tmp_path / "llama.yaml"
    assert run(tmp_path, LLAMA_31_8B, "--out", str(out)) == 0
    assert run(tmp_path, LLAMA_31_8B, "--out", str(out), "--name", "mine") == 0
    profile = yaml.safe_load(out.read_text())
    assert profile["name"] == "mine"
    notes = tmp_path / "notes.yaml"
    notes.write_text("todo: buy GPUs\n")
    # a hand-written profile, even a copy of a shipped one, is the user's: never replaced
    tuned = tmp_path / "tuned.yaml"
    tuned.write_text((ROOT / "profiles" / "models" / "llama-3.1-8b.yaml").read_text()
                     + "# hand-tuned\n")
    edited = tmp_path / "edited.yaml"          # written by import-model, header removed
    edited.write_text(out.read_text().split("\n", 1)[1])
    for theirs in (notes, tuned, edited):
        before = theirs.read_text()
        assert run(tmp_path, LLAMA_31_8B, "--out", str(theirs), "--name", "other") == 2
        assert theirs.read_text() == before
        assert "not a model profile fleetsim import-model wrote" in capsys.readouterr().err
    capsys.readouterr()
    import sim
    scenario = sim.load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    data = scenario.model_dump()
    data["models"] = {"mine": profile}
    for stream in data["workload"]["streams"].values():
        stream["model"] = "mine"
    for pool in data["pools"].values():
        pool["model"] = "mine"
    data["duration"] = 5.0
    from sim.config.scenario import Scenario
    assert sim.run(Scenario.model_validate(data)).summary["requests"]["completed"] > 0


def test_a_model_path_that_is_no_text_does_not_name_the_profile(tmp_path, capsys):
    assert run(tmp_path, {**LLAMA_31_8B, "_name_or_path": {"x": 1}}) == 0
    assert yaml.safe_load(capsys.readouterr().out)["name"] == tmp_path.name.lower()


def test_a_scenario_may_name_a_config_file_as_a_model(tmp_path, capsys):
    """models: {NAME: {config: PATH}} reads the config as import-model does; the file lies
    where data files may, and a config of an unknown kind is a located error."""
    import sim
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_31_8B))
    scenario = (ROOT / "scenarios" / "quickstart.yaml").read_text().replace(
        "model: llama-3.1-8b", "model: mine") + "models:\n  mine: {config: config.json}\n"
    path = tmp_path / "s.yaml"
    path.write_text(scenario)
    loaded = sim.load_scenario(path)
    shipped = yaml.safe_load((ROOT / "profiles" / "models" / "llama-3.1-8b.yaml").read_text())
    model = loaded.models["mine"]
    assert model.name == "mine"
    for field in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_size",
                  "vocab_size"):
        assert getattr(model, field) == shipped[field], field
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA_31_8B, "model_type": "rwkv"}))
    assert main(["lint", str(path)]) == 2
    assert "model_type 'rwkv' is not one fleetsim reads" in capsys.readouterr().err
    path.write_text(scenario.replace("{config: config.json}", "{config: /etc/hostname}"))
    assert main(["lint", str(path)]) == 2
    err = capsys.readouterr().err
    assert "models.mine.config: config file /etc/hostname: lies outside" in err


def test_a_config_saved_with_a_bom_reads(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(LLAMA_31_8B).encode())
    assert main(["import-model", str(path), "--name", "bom"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["name"] == "bom"


def test_a_name_from_the_config_that_breaks_the_rules_says_where_and_how_to_fix_it(
        tmp_path, capsys):
    assert run(tmp_path, {**LLAMA_31_8B, "_name_or_path": "org/" + "x" * 200}) == 2
    err = capsys.readouterr().err
    assert "_name_or_path" in err and "name it with --name" in err
    assert run(tmp_path, {**LLAMA_31_8B, "_name_or_path": "org/" + "x" * 200},
               "--name", "fine") == 0


@pytest.mark.parametrize("config, tied", [(GEMMA_7B, True),
                                          ({**GEMMA_7B, "tie_word_embeddings": False}, False),
                                          ({**GEMMA_7B, "model_type": "gemma2"}, True),
                                          ({k: v for k, v in LLAMA_31_8B.items()
                                            if k != "tie_word_embeddings"}, False)])
def test_a_config_without_tie_word_embeddings_takes_its_model_types_default(
        tmp_path, capsys, config, tied):
    """transformers' Gemma configs tie the LM head unless they say not to; the others
    do not: a config that leaves the key out means its class's default."""
    assert run(tmp_path, config) == 0
    profile = yaml.safe_load(capsys.readouterr().out)
    assert profile.get("tied_embeddings", False) is tied
