"""The typed scenario: what a planner writes in YAML.

Pydantic checks each block on its own (types, units, ranges, unknown keys,
``type:`` choices); ``sim.config.resolve`` then checks what spans blocks
(names that refer to profiles and pools, whether a model fits its GPUs).
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from sim.config.common import (Bytes, BytesPerS, Flag, Fraction, Name, PositiveBytes,
                               PositiveInt, PositiveSeconds, ReplicaCount, Seconds, StrictModel,
                               UsdPerGpuHour)
from sim.config.gateway import GatewayConfig
from sim.config.slos import SlosConfig
from sim.config.specs import DType, HardwareSpec, ModelSpec
from sim.config.workload import WorkloadConfig
from sim.cost import COST_MODELS, CostModelConfig
from sim.cost.measured import AutoConfig
from sim.config.engines import EngineEntry
from sim.autoscalers import AUTOSCALERS, AutoscalerConfig
from sim.routers import ROUTERS, RouterConfig
from sim.routers.round_robin import RoundRobinConfig
from sim.schedulers import SCHEDULERS, SchedulerConfig
from sim.schedulers.continuous_config import ContinuousConfig


class ColdStartConfig(StrictModel):
    """Time from asking for a replica to its serving: provisioning + weight load."""

    provisioning: Seconds = Field(60.0, description="Machine and container start")
    load_bandwidth: BytesPerS = Field(
        "2GB/s", description="Weight-load bandwidth per GPU (storage to GPU)")


class QueueConfig(StrictModel):
    """Where requests wait before a replica takes them."""

    capacity: PositiveInt | None = Field(
        None, description="Most requests waiting in the pool; beyond it the lowest priority, "
                          "then the newest, is shed")
    fair: Flag = Field(False, description="Weighted fair queueing between teams")
    weights: dict[Name, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict, description="Fair-share weight per team (default 1; > 0)")
    max_outstanding_per_replica: PositiveInt | None = Field(
        None, description="Requests a replica may hold (queued + running) before the pool "
                          "keeps the rest; unset = hand every request to a replica at once")


class SpotConfig(StrictModel):
    preemptions_per_hour: float = Field(
        ge=0, le=3600, description="Rate at which each replica is taken back (Poisson; at "
                                   "most 3,600 an hour)")


class SizingOptions(StrictModel):
    """What `fleetsim size` may choose for a pool, besides the replica count."""

    hardware: list[Name] | None = Field(None, description="GPU kinds to try")
    tp: list[PositiveInt] | None = Field(None, description="Tensor-parallel degrees to try")
    pp: list[PositiveInt] | None = Field(None, description="Pipeline-parallel stage counts to "
                                                           "try (each with every tp)")
    weight_dtype: list[DType] | None = Field(None, description="Weight precisions to try "
                                             "(default: the pool's weight_dtype)")
    kv_dtype: list[DType] | None = Field(
        None, description="KV cache precisions to try, each with every weight precision "
                          "(default: the pool's kv_dtype; a weight precision never changes "
                          "the KV cache's)")
    max_replicas: ReplicaCount = Field(64, description="Largest replica count to consider")
    min_replicas: ReplicaCount | None = Field(
        None, description="Fewest replicas size may choose: where the search for a fixed "
                          "pool's count starts, and under --autoscaled the lowest "
                          "autoscaler floor (min_replicas) tried; unset: 1 (under "
                          "--autoscaled, 0 for a pool configured to scale to zero); keep "
                          "2 or more for redundancy")

    @model_validator(mode="after")
    def _floor_under_the_cap(self) -> "SizingOptions":
        if self.min_replicas is not None and self.min_replicas > self.max_replicas:
            given = "" if "max_replicas" in self.model_fields_set else ", the default"
            raise ValueError(f"min_replicas ({self.min_replicas}) exceeds max_replicas "
                             f"({self.max_replicas}{given}): size would have no count to "
                             "try")
        return self

    @field_validator("hardware", "tp", "pp", "weight_dtype", "kv_dtype")
    @classmethod
    def _each_once(cls, values):
        if values is not None and not values:
            raise ValueError("an empty list: size would have nothing to try; list at least "
                             "one, or leave the field out for the pool's own setting")
        if values is not None:
            keys = [str(v).lower() for v in values]
            twice = next((v for v, k in zip(values, keys) if keys.count(k) > 1), None)
            if twice is not None:
                raise ValueError(f"{twice!r} is listed twice (names are read without case): "
                                 "size would try it twice")
        return values


class PoolConfig(StrictModel):
    """A group of identical replicas serving one model on one GPU kind."""

    model: Name = Field(description="Model profile name (shipped or under `models:`)")
    hardware: Name = Field(description="Hardware profile name (shipped or under `hardware:`)")
    tp: PositiveInt = Field(1, description="Tensor-parallel GPUs per replica")
    replicas: ReplicaCount = Field(1, description="Number of replicas")
    pp: PositiveInt = Field(
        1, description="Pipeline-parallel stages per replica: the model's layers split into "
                       "pp stages of tp GPUs each, a batch passing through them in turn "
                       "(stages past one node's GPUs on further nodes); a replica holds "
                       "tp x pp GPUs")
    pricing: Literal["on_demand", "reserved", "spot"] = Field(
        "on_demand", description="Which of the hardware's prices applies")
    price_per_gpu_hour: UsdPerGpuHour | None = Field(
        None, description="USD per GPU-hour (at most 10,000); overrides the hardware "
                          "profile's price")
    weight_dtype: DType = Field("bf16", description="Weight precision")
    kv_dtype: DType = Field("bf16", description="KV cache precision")
    block_size: PositiveInt = Field(16, le=4096, description="Tokens per KV block (at most "
                                                              "4,096)")
    gpu_memory_utilization: Fraction = Field(
        0.9, description="Share of GPU memory the engine may use")
    activation_reserve: Bytes = Field(
        "2GB", description="Per-GPU memory kept for activations and buffers")
    kv_cache_bytes: PositiveBytes | None = Field(
        None, description="Per-GPU KV cache size, instead of what memory leaves")
    prefix_caching: Flag = Field(
        True, description="Reuse cached KV blocks of shared prompt prefixes (vLLM's default)")
    max_model_len: PositiveInt | None = Field(
        None, description="Longest prompt + output accepted; default: the model's")
    engine: Name = Field(
        "vllm", description="The serving engine and version line: `vllm` (its default "
                            "version) or `vllm@v0`; the presets in profiles/engines.yaml "
                            "(vllm@v0, v0-multistep, v1, async; sglang@overlap; "
                            "trtllm@pytorch, cpp) or the scenario's `engines:`. It sets the "
                            "host time per step and whether it overlaps the GPU step, which "
                            "step a new request joins, multi-step blocks, the front end per "
                            "request and token hop, the continuous scheduler's default KV "
                            "admission, and whose measured kernels the default cost model "
                            "reads (see sim/config/engines.py)")
    front_end: Seconds | None = Field(
        None, le=60.0, description="Per-request time in the engine's front end (API server, "
                          "tokenisation, prefill dispatch) before the request reaches the "
                          "queue, so it adds to TTFT and end-to-end latency; it replaces the "
                          "engine preset's whole front end (its constant, per prompt token "
                          "and token hop); default: the preset's, or none on a calibrated "
                          "profile measured on a whole engine; at most 60 s")
    scheduler: SchedulerConfig = Field(default_factory=ContinuousConfig,
                                       description="Batching policy of each replica")
    router: RouterConfig = Field(default_factory=RoundRobinConfig,
                                 description="How the pool picks a replica")
    cost_model: CostModelConfig = Field(
        default_factory=AutoConfig,
        description="Where step times come from: auto (the shipped profile of kernels "
                    "measured on real GPUs for this model, GPU, TP and dtypes when one "
                    "exists, else the roofline), roofline (the datasheet) or calibrated "
                    "(a profile)")
    autoscaler: AutoscalerConfig | None = Field(
        None, description="Replica count policy; unset = fixed at `replicas`")
    cold_start: ColdStartConfig = Field(default_factory=ColdStartConfig,
                                        description="Start-up time of a new replica")
    queue: QueueConfig = Field(default_factory=QueueConfig, description="Pool queue")
    spot: SpotConfig | None = Field(None, description="Spot replicas: preemption rate")
    sizing: SizingOptions | None = Field(None, description="Options for `fleetsim size`")

    @property
    def fixed_size(self) -> bool:
        """Whether the pool keeps the replicas it is configured with: no autoscaler, or
        one that never starts replicas (the policy's ``starts_replicas``)."""
        return self.autoscaler is None or not self.autoscaler.starts_replicas


MAX_RUN_S = 10 * 365 * 86400.0
# a paragraph or a page: it is copied into the report and the results' scenario.yaml
MAX_DESCRIPTION_CHARS = 10_000


class Scenario(StrictModel):
    """A fleet and its traffic."""

    name: Name = Field("scenario", description="Short name shown in reports")
    description: str = Field("", max_length=MAX_DESCRIPTION_CHARS,
                             description="Free text (at most 10,000 characters)")
    seed: int = Field(0, ge=0, description="Seed of the run's random streams")
    duration: PositiveSeconds = Field(le=MAX_RUN_S, description="Arrivals are generated in "
                                                                "[0, duration); at most 10 years")
    drain: Seconds = Field(
        3600.0, le=MAX_RUN_S,
        description="After `duration`, time allowed for in-flight requests to finish; "
                    "requests still open then end as `unfinished`")
    sample_interval: PositiveSeconds = Field(1.0, description="Time-series sampling period")
    warmup: Seconds = Field(0.0, description="Requests arriving before this are left out "
                                             "of the latency figures (the queue filling up)")
    record_steps: Flag = Field(False, description="Record one row per engine step")
    max_requests: PositiveInt = Field(
        20_000_000, description="Refuse a run whose streams would send more requests than "
                                "this (each holds about 2 KB of memory)")
    hardware: dict[Name, HardwareSpec] = Field(
        default_factory=dict, description="Extra hardware profiles defined inline")
    models: dict[Name, ModelSpec] = Field(
        default_factory=dict, description="Extra model profiles defined inline")
    engines: dict[Name, EngineEntry] = Field(
        default_factory=dict, description="Extra engine presets defined inline, in the form "
                                          "of profiles/engines.yaml's `engines:` (a name "
                                          "there replaces the shipped engine of that name)")
    workload: WorkloadConfig
    gateway: GatewayConfig = Field(default_factory=GatewayConfig,
                                   description="Auth, team limits, model registry and routes")
    pools: dict[Name, PoolConfig] = Field(min_length=1, description="Pool name -> pool")
    slos: SlosConfig | None = Field(
        None, description="Service-level objectives: summary.json, the terminal summary and "
                          "the report give each one's verdict; `size` and `check` size "
                          "against them unless --slo is given")

    # Where the scenario was read from: relative paths in it resolve against this.
    _source: str | None = PrivateAttr(default=None)
    # Folders outside the scenario's own and the shipped data its files may be read from.
    _allow_paths: tuple[str, ...] = PrivateAttr(default=())
    # Fields given on the command line, each with its flag (``{"warmup": "--warmup"}``): a
    # problem found there later (while the run is prepared) names the flag, not a line.
    _flags: dict[str, str] = PrivateAttr(default_factory=dict)


# the fields each policy family fills: a policy registered later is accepted there too
SCHEDULERS.accepted_by(PoolConfig, "scheduler", dependents=(Scenario,))
ROUTERS.accepted_by(PoolConfig, "router", dependents=(Scenario,))
COST_MODELS.accepted_by(PoolConfig, "cost_model", dependents=(Scenario,))
AUTOSCALERS.accepted_by(PoolConfig, "autoscaler", lambda union: union | None,
                        dependents=(Scenario,))
