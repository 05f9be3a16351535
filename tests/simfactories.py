"""Factories with keyword defaults for scenarios, pools, streams, cost models,
requests and schedulers, so each test states only what it varies.

Scenarios are built as the plain dicts a YAML file would give and validated
with ``Scenario.model_validate``, i.e. through the same path as a user's file.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Iterable

import numpy as np

import sim
from sim.config import profiles
from sim.config.scenario import Scenario
from sim.cost.base import CostModel
from sim.cost.roofline import RooflineConfig, RooflineCostModel
from sim.cost.shape import BatchShape
from sim.entities.kv import KvCacheManager
from sim.entities.request import Request
from sim.output.results import Results
from sim.schedulers.base import ReplicaLimits
from sim.schedulers.continuous import ContinuousScheduler
from sim.schedulers.continuous_config import ContinuousConfig

MIB = 2 ** 20
GIB = 2 ** 30

# A model with 0.5 MiB of bf16 KV per token: 2 · 64 layers · 16 KV heads ·
# 128 head dim · 2 bytes = 524,288 bytes. Its weights (~6.6 GB in bf16) leave
# room for a 20 GiB KV cache on one 80 GB GPU.
KV_HEAVY_NAME = "kv-heavy"
KV_HEAVY_MODEL: dict[str, Any] = {
    "name": KV_HEAVY_NAME, "num_layers": 64, "hidden_size": 2048, "num_heads": 16,
    "num_kv_heads": 16, "head_dim": 128, "ffn_size": 5504, "vocab_size": 32000,
}
KV_HEAVY_BYTES_PER_TOKEN = 2 * 64 * 16 * 128 * 2


# -- workload ------------------------------------------------------------------
def poisson_stream(*, rate: float | str = 5.0, prompt_tokens: Any = 512,
                   output_tokens: Any = 128, **extra) -> dict:
    """A Poisson stream; lengths take the YAML forms (an int is a fixed length)."""
    return {"arrival": {"type": "poisson", "rate": rate}, "prompt_tokens": prompt_tokens,
            "output_tokens": output_tokens, **extra}


def uniform(low: int, high: int) -> dict:
    return {"type": "uniform", "low": low, "high": high}


def lognormal(mean: float, cv: float = 1.0, **bounds) -> dict:
    return {"type": "lognormal", "mean": mean, "cv": cv, **bounds}


def write_trace(path: Path, rows: Iterable[tuple[float, int, int]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["timestamp", "prompt_tokens", "output_tokens"])
        for t, p, o in rows:
            out.writerow([repr(float(t)), int(p), int(o)])
    return path


def trace_stream(path: Path, rows: Iterable[tuple[float, int, int]], **extra) -> dict:
    """A stream replaying ``rows`` = (timestamp_s, prompt_tokens, output_tokens)."""
    write_trace(path, rows)
    return {"arrival": {"type": "trace", "path": str(path)}, **extra}


# -- fleet -----------------------------------------------------------------------
def continuous(**cfg) -> dict:
    return {"type": "continuous", **cfg}


def static(**cfg) -> dict:
    return {"type": "static", **cfg}


def single() -> dict:
    return {"type": "single"}


def make_pool(*, model: str = "llama-3.1-8b", hardware: str = "H100-SXM",
              scheduler: dict | None = None, **extra) -> dict:
    """A pool on the roofline unless ``cost_model`` says otherwise: the tests of
    scheduling price steps with ``make_cost_model``, the same analytic model (a pool
    left to the default would run on the shipped measured-kernel profile), with its host
    terms written (so they stay) on a synchronous engine (``engine: vllm@v1``: a request
    joins the next step) unless ``engine`` is given. Requests reach its replicas at once
    (``front_end: 0``, no token hop) unless ``front_end`` is given: pass
    ``front_end=None`` for the engine's own."""
    extra.setdefault("cost_model", {"type": "roofline", "step_overhead": 1e-3})
    extra.setdefault("engine", "vllm@v1")
    extra.setdefault("front_end", 0)
    if extra["front_end"] is None:
        del extra["front_end"]
    return {"model": model, "hardware": hardware,
            "scheduler": scheduler if scheduler is not None else continuous(), **extra}


def make_scenario(*, stream: dict | None = None, pool: dict | None = None,
                  streams: dict | None = None, pools: dict | None = None,
                  seed: int = 0, duration: float | str = 60.0,
                  models: dict | None = None, **top) -> Scenario:
    """One stream ``s`` into one pool ``p`` unless ``streams``/``pools`` are given.

    The 0.5 MiB/token model is added to ``models`` whenever a pool names it.
    """
    streams = streams if streams is not None else {"s": stream or poisson_stream()}
    pools = pools if pools is not None else {"p": pool or make_pool()}
    models = dict(models or {})
    if any(p["model"] == KV_HEAVY_NAME for p in pools.values()):
        models.setdefault(KV_HEAVY_NAME, KV_HEAVY_MODEL)
    return Scenario.model_validate({
        "seed": seed, "duration": duration, "models": models,
        "workload": {"streams": streams}, "pools": pools, **top})


def run_scenario(**kwargs) -> Results:
    return sim.run(make_scenario(**kwargs))


# -- components --------------------------------------------------------------------
def model_spec(name: str = "llama-3.1-8b"):
    if name == KV_HEAVY_NAME:
        from sim.config.specs import ModelSpec
        return ModelSpec.model_validate(KV_HEAVY_MODEL)
    spec = profiles.find_model(name)
    assert spec is not None, name
    return spec


def hardware_spec(name: str = "H100-SXM"):
    spec = profiles.find_hardware(name)
    assert spec is not None, name
    return spec


def make_cost_model(*, model: str = "llama-3.1-8b", hardware: str = "H100-SXM", tp: int = 1,
                    weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                    **roofline) -> RooflineCostModel:
    return RooflineCostModel(model_spec(model), hardware_spec(hardware), tp, weight_dtype,
                             kv_dtype, RooflineConfig(**roofline))


def decode_shape(*, num_seqs: float = 1, context_tokens: float = 128) -> BatchShape:
    """A decode-only step of ``num_seqs`` sequences reading ``context_tokens`` KV in all."""
    return BatchShape(num_tokens=float(num_seqs), num_seqs=float(num_seqs),
                      prefill_attn_work=0.0, decode_kv_tokens=float(context_tokens))


def prefill_shape(*, prompt_tokens: float = 512) -> BatchShape:
    """One sequence's whole prompt in a single step."""
    return BatchShape(num_tokens=float(prompt_tokens), num_seqs=1.0,
                      prefill_attn_work=BatchShape.prefill_work(float(prompt_tokens), 0.0),
                      decode_kv_tokens=0.0)


def make_request(*, request_id: int = 0, prompt_tokens: int = 100,
                 max_output_tokens: int = 10, arrival_s: float = 0.0, priority: int = 0,
                 team: str = "t", model: str = "m", pool: str = "p") -> Request:
    return Request(request_id, 0, team, model, pool, priority, arrival_s, prompt_tokens,
                   max_output_tokens)


def make_continuous_scheduler(*, num_blocks: int = 64, block_size_tokens: int = 16,
                              max_model_len: int = 1 << 20, cost=None, on_finish=None,
                              gaps=None, **cfg) -> ContinuousScheduler:
    """A continuous scheduler on its own, outside any simulation (``gaps``: where it counts
    the gaps between tokens; its own by default)."""
    return ContinuousScheduler(
        ContinuousConfig(**cfg), kv=KvCacheManager(num_blocks, block_size_tokens),
        cost=cost if cost is not None else make_cost_model(),
        limits=ReplicaLimits(max_model_len=max_model_len),
        on_finish=on_finish if on_finish is not None else (lambda req: None), gaps=gaps)


def run_step(sched, now_s: float = 0.0):
    """Plan and apply one segment in full; returns the segment (or None/float)."""
    seg = sched.next_segment(now_s)
    if seg is not None and not isinstance(seg, float):
        sched.finish_segment(seg, seg.num_steps, now_s, now_s + seg.duration_s)
    return seg


def single_service_time_s(cost, prompt_tokens: int, output_tokens: int) -> float:
    """Closed-form service time of one request run alone: a prefill step that
    samples the first token, then one decode step per further token, the j-th
    reading ``prompt + j`` tokens of KV."""
    j = np.arange(1, output_tokens, dtype=np.float64)
    decode = cost.step_time_s(BatchShape(num_tokens=np.ones_like(j), num_seqs=np.ones_like(j),
                                         prefill_attn_work=np.zeros_like(j),
                                         decode_kv_tokens=prompt_tokens + j))
    prefill = cost.step_time_s(prefill_shape(prompt_tokens=prompt_tokens))
    return float(prefill) + float(np.sum(decode))


# -- what a router sees of a replica ---------------------------------------------------------
class FakeReplica:
    """What a router sees of a replica: index, load and KV cache use."""

    def __init__(self, index: int, outstanding: int = 0, used_blocks: int = 0,
                 num_blocks: int = 100, cached_tokens: int = 0) -> None:
        self.index = index
        self.num_outstanding = outstanding
        self.used_blocks = used_blocks
        self.kv_blocks_total = num_blocks
        self.cached_tokens = cached_tokens      # of any prompt, in its prefix cache

    def cached_prompt_tokens(self, req) -> int:
        return min(self.cached_tokens, req.prompt_tokens)

    def kv_used_blocks(self) -> int:
        return self.used_blocks

    @property
    def kv_usage(self) -> float:
        return self.used_blocks / self.kv_blocks_total

    def __repr__(self) -> str:
        return f"FakeReplica({self.index}, out={self.num_outstanding})"


# -- a cost model of constant steps, for schedules worked out by hand ---------------------
class ConstantStepCost(CostModel):
    """Every step's GPU work takes ``step_s`` whatever the batch, and holds no host time
    (an engine preset adds its own). Built in place of a pool's cost model by
    ``constant_steps``."""

    decode_time_linear = True          # constant: slope 0
    peak_flops_per_gpu = 1e15
    peak_bytes_per_s_per_gpu = 1e12

    def __init__(self, step_s: float, num_layers: int = 32, tp: int = 1) -> None:
        self.step_s, self.num_layers, self.tp = step_s, num_layers, tp

    @property
    def label(self) -> str:
        return f"constant {self.step_s:g} s steps"

    def host_terms(self):
        return 0.0, 0.0, False

    def _zero(self, x):
        return 0.0 * np.asarray(x, dtype=np.float64)

    overhead_s = dense_s = attn_prefill_s = attn_decode_s = tp_comm_s = lm_head_s = _zero

    def work(self, shape):
        return self._zero(shape.num_tokens), self._zero(shape.num_tokens)

    def step_time_s(self, shape):
        return self.step_s + self._zero(shape.num_tokens)

    def step_scalar(self, num_tokens, num_seqs, prefill_attn_work, decode_kv_tokens,
                    kv_read_tokens=None, sequences=None):
        return self.step_s, 0.0, 0.0


def constant_steps(monkeypatch, step_s: float) -> None:
    """Pools built from now on (in this test) run GPU steps of ``step_s`` seconds."""
    import sim.core.fleet as fleet
    monkeypatch.setattr(fleet, "build_cost_model", lambda spec, base_dir=None:
                        ConstantStepCost(step_s, spec.model.num_layers, spec.cfg.tp))


def toy_engine(**values) -> dict:
    """An inline engine preset (``engines: {toy: ...}``) whose every value is given in
    ``values`` or zero / next / 1, each with a stated source."""
    defaults = {"host_mode": "sync", "host_constant_s": 0.0, "host_per_seq_s": 0.0,
                "join": "next", "multi_step": 1, "front_end_constant_s": 0.0,
                "front_end_per_prompt_token_s": 0.0, "token_hop_s": 0.0,
                "kv_admission": "on_demand", "prefill_only_steps": False,
                "finished_extra_steps": 0}
    preset = {"describes": "a test engine"}
    for key, value in {**defaults, **values}.items():
        preset[key] = {"value": value, "source": "a hand-worked test schedule"}
    return {"default": "only", "versions": {"only": preset}}
