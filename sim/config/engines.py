"""What a serving engine adds around the GPU kernels: one preset per engine.

A pool names its engine (``engine: vllm | sglang | trtllm``). The engine decides

- which shipped measured-kernel profiles the default cost model reads
  (``profiles/calibrated/gpu/<gpu>/<engine>/``: each engine's own kernels, as
  AIConfigurator's database timed them under that engine);
- the per-request front-end time that adds to TTFT and to nothing else: the API
  server, tokenisation and the engine's CPU-side dispatch of a request's prefill,
  which kernel timings do not see (``front_end_s``; a pool's ``front_end`` overrides
  it);
- the default KV admission of the continuous scheduler: vLLM and SGLang allocate
  blocks as tokens are computed and preempt when they run out; TensorRT-LLM's default
  capacity scheduler (``GUARANTEED_NO_EVICT``) admits a request only when its whole
  output fits.

The host time per step and per sequence (scheduling, input preparation, sampling) is
the same for the three until one is measured: fleetsim's defaults (1 ms and 5 us, the
roofline's ``step_overhead`` and ``per_seq_overhead``), which the measured-kernel
profiles carry as their ``overhead``. TensorRT-LLM's profiles mark it
``host_overlapped``: its PyTorch backend's overlap scheduler (on by default) prepares
the next step on the host while the GPU runs this one, so a step lasts the longer of
the two; vLLM's and SGLang's add it (SGLang 0.4's overlap scheduler, also on by
default, is not modelled: its rows were left as they were; ``calibrate.from_kernels``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EngineName = Literal["vllm", "sglang", "trtllm"]


@dataclass(frozen=True)
class EnginePreset:
    front_end_s_per_layer: float   # per request, added to TTFT
    kv_admission: str              # the continuous scheduler's default
    source: str


PRESETS: dict[str, EnginePreset] = {
    "vllm": EnginePreset(
        front_end_s_per_layer=0.8e-3, kv_admission="on_demand",
        source="AIConfigurator 0.12's vLLM backend: CPU-side prefill dispatch not captured "
               "by kernel timings, 0.8 ms per layer per request, fitted by its authors on "
               "their own measured vLLM runs"),
    "sglang": EnginePreset(
        front_end_s_per_layer=0.0, kv_admission="on_demand",
        source="AIConfigurator 0.12's SGLang backend adds no per-request dispatch time"),
    "trtllm": EnginePreset(
        front_end_s_per_layer=0.0, kv_admission="guaranteed_no_evict",
        source="TensorRT-LLM's default capacity scheduler (GUARANTEED_NO_EVICT); "
               "AIConfigurator 0.12's TensorRT-LLM backend adds no per-request dispatch "
               "time"),
}


def with_engine_admission(engine: str, scheduler_cfg):
    """The scheduler's settings with the engine's KV admission where they leave it unset
    (``kv_admission: null``, the default of the continuous scheduler)."""
    if getattr(scheduler_cfg, "kv_admission", "") is None:
        return scheduler_cfg.model_copy(update={"kv_admission": PRESETS[engine].kv_admission})
    return scheduler_cfg


def front_end_s(engine: str, num_layers: int, override_s: float | None = None,
                measured_on_engine: bool = False) -> float:
    """Seconds a request spends in the engine's front end before it can be scheduled: the
    pool's own, else none when the step times were measured on the whole engine (they
    hold it already), else the engine's."""
    if override_s is not None:
        return float(override_s)
    if measured_on_engine:
        return 0.0
    return PRESETS[engine].front_end_s_per_layer * num_layers
