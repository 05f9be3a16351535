"""Model shapes for calibration, and the tensor-parallel shard of one layer.

Calibration needs only the architecture numbers of a model profile. They come
from ``sim.config.profiles`` (validated) when the simulator's dependencies are
installed, and otherwise straight from the shipped YAML, so the benchmarks
also run on a bare machine that has torch, numpy and PyYAML but not the
simulator's other dependencies (a GPU host, say).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

# Architecture fields a calibrated profile records and checks against a pool's model.
SHAPE_FIELDS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                "ffn_size", "vocab_size", "num_experts", "experts_per_token")


@dataclass(frozen=True)
class ModelShape:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_size: int
    vocab_size: int
    num_experts: int = 1
    experts_per_token: int = 1
    max_model_len: int = 131072

    def __post_init__(self) -> None:
        if self.head_dim % 2:       # rotary embeddings turn pairs of a head's dimensions
            raise ValueError(f"head_dim {self.head_dim} is odd: the timed layers use rotary "
                             "position embeddings, which need an even head size")

    @classmethod
    def from_mapping(cls, data: dict) -> "ModelShape":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known and v is not None})

    def shape_dict(self) -> dict:
        out = {"name": self.name}
        out.update({f: int(getattr(self, f)) for f in SHAPE_FIELDS})
        return out

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ShardShape:
    """One transformer layer's shapes on one of ``tp`` tensor-parallel GPUs.

    Attention heads, KV heads (replicated when there are fewer than ``tp``),
    the MLP's intermediate size and the LM head's vocabulary are divided by
    ``tp``; the hidden size is not.
    """

    model: ModelShape
    tp: int = 1

    def __post_init__(self) -> None:
        m, tp = self.model, self.tp
        if tp < 1:
            raise ValueError(f"tp must be at least 1, got {tp}")
        if m.num_heads % tp:
            raise ValueError(f"tp={tp} does not divide {m.name}'s {m.num_heads} attention heads")
        if m.num_kv_heads % tp and tp % m.num_kv_heads:
            raise ValueError(f"tp={tp} does not divide {m.name}'s {m.num_kv_heads} KV heads")
        if m.ffn_size % tp:
            raise ValueError(f"tp={tp} does not divide {m.name}'s MLP size {m.ffn_size}")

    @property
    def hidden(self) -> int:
        return self.model.hidden_size

    @property
    def heads(self) -> int:
        return self.model.num_heads // self.tp

    @property
    def kv_heads(self) -> int:
        return max(1, self.model.num_kv_heads // self.tp)

    @property
    def head_dim(self) -> int:
        return self.model.head_dim

    @property
    def ffn(self) -> int:
        return self.model.ffn_size // self.tp

    @property
    def vocab(self) -> int:
        return math.ceil(self.model.vocab_size / self.tp)

    @property
    def num_experts(self) -> int:
        return self.model.num_experts

    @property
    def experts_per_token(self) -> int:
        return self.model.experts_per_token

    def layer_params(self) -> int:
        """Parameters of one layer on this shard (attention, MLP or experts, norms)."""
        d, hd = self.hidden, self.head_dim
        attn = d * (self.heads + 2 * self.kv_heads) * hd + self.heads * hd * d
        mlp = self.num_experts * 3 * d * self.ffn
        if self.num_experts > 1:
            mlp += d * self.num_experts
        return attn + mlp + 2 * d

    def kv_elems_per_token(self) -> int:
        """K and V elements one token adds to one layer's cache on this shard."""
        return 2 * self.kv_heads * self.head_dim


def profiles_dir() -> Path:
    """The shipped ``profiles/`` folder (the wheel's or the repository's)."""
    try:
        from sim.config.paths import data_dir
    except ImportError:  # a bare host without the simulator's dependencies
        return Path(__file__).resolve().parents[2] / "profiles"
    return data_dir("profiles")


def _yaml_models() -> dict[str, dict]:
    out = {}
    for path in sorted((profiles_dir() / "models").glob("*.yaml")):
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
        out[str(data["name"]).strip().lower()] = data
    return out


def load_model(name: str) -> ModelShape:
    """The shipped model profile ``name`` (case-insensitive), or a model YAML file
    given by its path; ValueError if unknown."""
    if name.endswith((".yaml", ".yml")) and Path(name).is_file():
        try:
            from sim.config.specs import ModelSpec
            from sim.config.yamlio import load_model as load_validated
        except ImportError:          # on a bare GPU machine: the file as it is
            with open(name, encoding="utf-8") as fh:
                return ModelShape.from_mapping(yaml.safe_load(fh))
        # read as a scenario is: YAML 1.2, located errors (ScenarioError), no traceback
        spec = load_validated(Path(name), ModelSpec, kind="model profile")
        return ModelShape.from_mapping(spec.model_dump())
    try:
        from sim.config import profiles
    except ImportError:
        models = _yaml_models()
        data = models.get(name.strip().lower())
        if data is None:
            raise ValueError(f"unknown model '{name}'; known models: "
                             f"{', '.join(sorted(models))}") from None
        return ModelShape.from_mapping(data)
    spec = profiles.find_model(name)
    if spec is None:
        raise ValueError(f"unknown model '{name}'; known models: "
                         f"{', '.join(sorted(profiles.model_names(), key=str.lower))}")
    return ModelShape.from_mapping(spec.model_dump())
