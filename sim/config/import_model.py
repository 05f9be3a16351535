"""A model profile from a Hugging Face ``config.json`` (``fleetsim import-model``).

Decoder-only transformers whose shape the config states in the usual fields: Llama,
Mistral, Mixtral, Qwen2/Qwen3 (dense and MoE), Phi-3, Gemma and others of the same
layout (GQA through ``num_key_value_heads``, a head size other than hidden / heads
through ``head_dim``, tied embeddings, routed experts). A config of another kind is
refused with the model types that are read; one missing a field names every field it
lacks. Nothing is downloaded: the file is read as JSON, never run.
"""
from __future__ import annotations

import json
from pathlib import Path

import pydantic

from sim.config.errors import ScenarioError
from sim.config.inputs import InputFileError, read_bytes, shown
from sim.config.specs import ModelSpec

# model_type -> how its MoE fields are named (None: dense)
KNOWN = {
    "llama": None, "mistral": None, "qwen2": None, "qwen3": None, "phi3": None,
    "gemma": None, "gemma2": None, "granite": None, "olmo2": None,
    "mixtral": ("num_local_experts", "num_experts_per_tok", "intermediate_size"),
    "qwen2_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
}
# model types whose config class ties the LM head to the embeddings unless it says not to
# (transformers' GemmaConfig, Gemma2Config); the others default to untied
TIED_BY_DEFAULT = ("gemma", "gemma2")
# fields of an architecture fleetsim does not model: a config that uses them is refused
# rather than read as a model it is not (field -> what it would take)
UNMODELLED = {
    "shared_expert_intermediate_size": "a shared expert beside the routed ones, run for "
                                       "every token",
    "mlp_only_layers": "layers with a dense MLP instead of experts",
}
REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
            "vocab_size")


def read_config(path: Path) -> dict:
    """The config's JSON object; a located error when it is none."""
    where = shown(path)
    try:
        raw = read_bytes(path, max_bytes=2**20)
    except InputFileError as exc:
        raise ScenarioError(exc.message, file=where) from None
    try:
        data = json.loads(raw.decode("utf-8-sig"))     # (a Windows editor's BOM too)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ScenarioError("not a JSON config (a Hugging Face config.json)", file=where) \
            from None
    if not isinstance(data, dict):
        raise ScenarioError("not a Hugging Face config.json: the top level must be an object",
                            file=where)
    return data


def profile_from_config(data: dict, name: str, file: str) -> dict:
    """The model profile (as the shipped YAML files hold it) a config describes."""
    kind = data.get("model_type")
    if not isinstance(kind, str) or kind not in KNOWN:
        given = repr(kind) if isinstance(kind, str) or kind is None else \
            f"of type {type(kind).__name__}"
        raise ScenarioError(f"model_type {given} is not one fleetsim reads; it reads "
                            f"{', '.join(sorted(KNOWN))} (or write the profile by hand: "
                            "see profiles/models/)", file=file, field="model_type")
    moe = KNOWN[kind]
    needed = list(REQUIRED) + ([moe[0], moe[1], moe[2]] if moe else [])
    missing = [f for f in dict.fromkeys(needed) if f not in data]
    if missing:
        raise ScenarioError(f"missing field(s) {', '.join(missing)} for a {kind} model",
                            file=file)
    optional = ("num_key_value_heads", "head_dim", "max_position_embeddings")
    for field in [*dict.fromkeys(needed), *(f for f in optional if data.get(f) is not None)]:
        value = data[field]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError(f"expected a whole number, got a {type(value).__name__}",
                                file=file, field=field)
    for field, what in UNMODELLED.items():
        if data.get(field):
            raise ScenarioError(f"the config has {what}, which fleetsim does not model (its "
                                "weights and time would be left out); write the profile by "
                                "hand with the nearest shape, see profiles/models/",
                                file=file, field=field)
    tied = data.get("tie_word_embeddings", kind in TIED_BY_DEFAULT)
    if not isinstance(tied, bool):
        raise ScenarioError(f"expected true or false, got a {type(tied).__name__}",
                            file=file, field="tie_word_embeddings")
    heads = data["num_attention_heads"]
    kv_heads = data.get("num_key_value_heads")
    head_dim = data.get("head_dim")
    sources = {"num_layers": "num_hidden_layers", "hidden_size": "hidden_size",
               "num_heads": "num_attention_heads",
               "num_kv_heads": "num_key_value_heads" if kv_heads is not None
               else "num_attention_heads",
               "head_dim": "head_dim" if head_dim is not None else "hidden_size",
               "ffn_size": moe[2] if moe else "intermediate_size", "vocab_size": "vocab_size",
               "max_model_len": "max_position_embeddings"}
    profile = {
        "name": name,
        "num_layers": data["num_hidden_layers"],
        "hidden_size": data["hidden_size"],
        "num_heads": heads,
        "num_kv_heads": heads if kv_heads is None else kv_heads,
        "head_dim": head_dim if head_dim is not None else _whole(data["hidden_size"], heads,
                                                                 file),
        "ffn_size": data[moe[2]] if moe else data["intermediate_size"],
        "vocab_size": data["vocab_size"],
    }
    if moe:
        profile["num_experts"] = data[moe[0]]
        profile["experts_per_token"] = data[moe[1]]
        sources.update(num_experts=moe[0], experts_per_token=moe[1])
    if tied:
        profile["tied_embeddings"] = True
    if data.get("max_position_embeddings") is not None:
        profile["max_model_len"] = data["max_position_embeddings"]
    try:
        ModelSpec.model_validate(profile)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        message = str(err["msg"]).removeprefix("Value error, ")
        loc = err["loc"]
        field = sources.get(str(loc[0])) if loc else None
        if field is None:
            raise ScenarioError(f"the config's fields do not make a model: {message}",
                                file=file) from None
        raise ScenarioError(message, file=file, field=field) from None
    return profile


def _whole(hidden: int, heads: int, file: str) -> int:
    if heads <= 0 or hidden % heads != 0:
        raise ScenarioError("no head_dim, and hidden_size is not a whole multiple of "
                            "num_attention_heads", file=file, field="head_dim")
    return hidden // heads


def import_model(path: Path, name: str | None = None) -> dict:
    """The profile of the config at ``path``, named ``name`` (default: the model's own
    name in the config, else the folder holding config.json, else the file's stem)."""
    data = read_config(path)
    if name is None:
        given = data.get("_name_or_path")
        given = given.rstrip("/").split("/")[-1] if isinstance(given, str) else ""
        name = given or (path.parent.name if path.stem == "config" else path.stem) or "model"
        name = name.lower()
        message = name_problem(name)
        if message is not None:
            source = "_name_or_path" if given else "the file's name"
            raise ScenarioError(f"the profile's name, taken from {source}, is not a name a "
                                f"scenario can give ({message}): name it with --name",
                                file=shown(path),
                                field="_name_or_path" if given else None)
    return profile_from_config(data, name, shown(path))


def name_problem(name: str) -> str | None:
    """What breaks the rules of every name a scenario gives in ``name``, or None."""
    from pydantic import TypeAdapter

    from sim.config.common import Name
    try:
        TypeAdapter(Name).validate_python(name)
    except pydantic.ValidationError as exc:
        return exc.errors()[0]["msg"].removeprefix("Value error, ")
    return None
