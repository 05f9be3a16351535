"""The default cost model: a shipped profile built from GPU kernels measured on real GPUs
when one matches the pool, the roofline otherwise.

``profiles/calibrated/gpu/<gpu>/<engine>/<model>-tp<N>-<dtype>[-kv<dtype>].yaml`` are
built by ``python -m calibrate gpu-profiles`` from NVIDIA AIConfigurator's database of
measured kernels. A pool whose model (by name and shape), GPU, TP, weight and KV dtypes
have one runs on it; any other pool (another GPU or engine, a combination the database
lacks kernels for, a model of the scenario's own) on the datasheet roofline. ``summary.json`` says which
(``pools.NAME.cost_model``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import model_validator

from sim.cost.base import CostModelConfigBase
from sim.config.specs import HardwareSpec, ModelSpec
from sim.config.paths import data_dir


class AutoConfig(CostModelConfigBase):
    """The pool's engine (``engine:``) says whose measured kernels are read."""
    type: Literal["auto"] = "auto"

    @model_validator(mode="before")
    @classmethod
    def _engine_moved(cls, data):
        if isinstance(data, dict) and "engine" in data:
            raise ValueError("the engine is the pool's now: write `engine:` under the pool "
                             "(vllm, sglang or trtllm), not under cost_model")
        return data


def profile_name(model: str, tp: int, dtype: str, kv_dtype: str) -> str:
    return f"{model}-tp{tp}-{dtype}" + ("" if kv_dtype == "bf16" else f"-kv{kv_dtype}") + ".yaml"


def build(model: ModelSpec, hardware: HardwareSpec, tp: int, weight_dtype: str,
          kv_dtype: str, cfg: AutoConfig, engine: str = "vllm"):
    """The pool's cost model: calibrated on its shipped profile, else the roofline (also
    when the profile was made for another shape: a model of the scenario's own under a
    shipped name)."""
    from sim.cost.calibrated import CalibratedConfig, CalibratedCostModel
    from sim.cost.roofline import RooflineConfig, RooflineCostModel
    path = shipped_profile(hardware, model.name, tp, weight_dtype, kv_dtype, engine)
    if path is not None:
        try:
            return CalibratedCostModel(model, hardware, tp, weight_dtype, kv_dtype,
                                       CalibratedConfig(profile=str(path)))
        except ValueError:
            pass
    return RooflineCostModel(model, hardware, tp, weight_dtype, kv_dtype, RooflineConfig())


def shipped_profile(hardware: HardwareSpec, model: str, tp: int, weight_dtype: str,
                    kv_dtype: str, engine: str = "vllm") -> Path | None:
    """The shipped measured-kernel profile named for this model, GPU, TP and dtypes, or
    None."""
    path = (data_dir("profiles") / "calibrated" / "gpu" / hardware.name.lower() / engine
            / profile_name(model, tp, weight_dtype, kv_dtype))
    return path if path.is_file() else None
