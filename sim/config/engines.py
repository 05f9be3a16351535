"""What a serving engine adds around the GPU kernels: one preset per engine and version.

A pool names its engine and, optionally, a version line: ``engine: vllm`` (the engine's
default version) or ``engine: vllm@v0``. The presets live in ``profiles/engines.yaml``,
each value with its source; a scenario may add or replace engines under its own
``engines:`` block, in the same form. An engine name or version that is not known is
refused with the known ones listed; a preset value without a source, negative, or
missing is refused at its file, line and field.

A preset decides, each as an event in time in the simulation (no fitted adder):

- the host time of a step, ``host_constant_s + host_per_seq_s x sequences`` (divided
  by ``multi_step``): with ``host_mode: sync`` it adds to the GPU step; with
  ``overlap`` the host prepares step k+1 while step k runs, so a step lasts
  ``max(GPU step, host)`` (``sim/cost/engine_host.py``);
- which step a request that arrives while step k runs can join: ``next`` (k+1) or
  ``after_next`` (k+2: the batch of k+1 was formed when k started), and ``multi_step``
  (a request waits for the running block of n steps to end; ``sim/core/replica.py``);
- the front end per request, ``front_end_constant_s + front_end_per_prompt_token_s x
  prompt tokens``, before the request reaches the queue, and the hop of its tokens to
  the client, ``token_hop_s`` (first token and finish as the client sees them;
  ``sim/core/pool.py``);
- the default KV admission of the continuous scheduler (TensorRT-LLM's capacity
  scheduler admits a request only when its whole output fits);
- which shipped measured-kernel profiles the default cost model reads
  (``profiles/calibrated/gpu/<gpu>/<engine>/``: by engine name).

- the extra step of a finished request, ``finished_extra_steps`` (1 where the scheduler
  forms step k+1 before it has read step k's tokens: a request whose last token came
  with step k decodes once more in step k+1, its token thrown away, holding its batch
  slot and KV blocks until k+1 ends; the client has its last token at k's end;
  ``sim/schedulers/finished_extra_step.py``).

Not modelled yet: a per-prompt-token host cost (0.05 us scaled for V1: negligible).

Where the host time lives: the kernel tables (AIConfigurator's database) time GPU work
only, so a measured-kernel profile's step is its kernels and the preset's host time is
the only host term. The profiles' ``overhead`` block holds fleetsim's old host default
(1 ms + 5 us per sequence, the roofline's ``step_overhead`` and ``per_seq_overhead``;
its ``host_per_seq_s`` names the per-sequence part) beside a GPU part (decode
attention's per-sequence cost); the cost model reports its host part
(``CostModel.host_terms``) and the preset's replaces it. A profile timed on this
machine's CPU (no ``host_per_seq_s``) keeps its measured overhead as its host terms. A roofline whose
``step_overhead`` or ``per_seq_overhead`` is written in the scenario keeps them as the
host terms (the preset's mode, join rule and front end still apply), as a pool's
explicit ``front_end:`` replaces the preset's front end (and its token hop: the
override is the whole front end). A calibrated profile measured on a whole engine
(an ``engine`` block) holds that engine's host work, front end and joins already: no
preset timing is added to it (nor a finished request's extra step). A pipeline-parallel pool (pp > 1) keeps its cost model's
host terms, once per micro-batch (``sim/cost/pipeline.py``).

The vLLM preset's former front end, AIConfigurator's 0.8 ms x layers, is gone: it was
fitted in a model without a queue, so it held the waits for the step in flight and the
next step that the join rule and host time now simulate; adding both counted them twice.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Generic, Literal, TypeVar

from pydantic import Field, NonNegativeFloat, model_validator

from sim.config.common import Name, PositiveInt, StrictModel
from sim.config.paths import data_dir

T = TypeVar("T")
ENGINES_FILE = "engines.yaml"       # under profiles/
SEPARATOR = "@"                     # engine@version


class Sourced(StrictModel, Generic[T]):
    """A preset value and where it comes from (a publication, or 'assumption: ...')."""

    value: T
    source: str = Field(min_length=10, max_length=2000,
                        description="Where the value comes from: a publication, a derivation "
                                    "from one, or 'assumption:' and why")


class EngineVersion(StrictModel):
    """One version line of an engine: every value with its source."""

    describes: str = Field(min_length=1, max_length=500,
                           description="Which releases and settings this preset is")
    host_mode: Sourced[Literal["sync", "overlap"]] = Field(
        description="sync: host time adds to the GPU step; overlap: a step lasts "
                    "max(GPU step, host time)")
    host_constant_s: Sourced[NonNegativeFloat] = Field(description="Host seconds per step")
    host_per_seq_s: Sourced[NonNegativeFloat] = Field(
        description="Host seconds per step per sequence in the batch")
    join: Sourced[Literal["next", "after_next"]] = Field(
        description="The step a request arriving during step k can join: k+1 or k+2")
    multi_step: Sourced[PositiveInt] = Field(description="Steps per scheduling block (1: none)")
    front_end_constant_s: Sourced[NonNegativeFloat] = Field(
        description="Seconds per request before it can be scheduled")
    front_end_per_prompt_token_s: Sourced[NonNegativeFloat] = Field(
        description="Front-end seconds per prompt token (tokenising)")
    token_hop_s: Sourced[NonNegativeFloat] = Field(
        description="Seconds from a step's end to its token at the client")
    kv_admission: Sourced[Literal["on_demand", "whole_prompt", "guaranteed_no_evict",
                                  "estimated_output"]] = \
        Field(description="The continuous scheduler's default KV admission")
    prefill_only_steps: Sourced[bool] = Field(
        description="The continuous scheduler's default: true, a step that prefills runs "
                    "no decode (the running decodes wait for it); false, they share it")
    finished_extra_steps: Sourced[Literal[0, 1]] = Field(
        description="Steps a request stays in the batch after its last token: 1 for a "
                    "scheduler that forms step k+1 before it has read step k's tokens "
                    "(the request decodes once more, holding its KV blocks), else 0")


class EngineEntry(StrictModel):
    """An engine: its version lines and the one ``engine: NAME`` means."""

    default: Name = Field(description="The version `engine: NAME` runs")
    versions: dict[Name, EngineVersion] = Field(min_length=1,
                                                description="Version line -> preset")

    @model_validator(mode="after")
    def _default_is_a_version(self) -> "EngineEntry":
        if self.default not in self.versions:
            raise ValueError(f"default version '{self.default}' is not one of "
                             f"{', '.join(self.versions)}")
        return self


class EnginesFile(StrictModel):
    engines: dict[Name, EngineEntry] = Field(min_length=1, description="Engine -> presets")


@dataclass(frozen=True)
class EnginePreset:
    """One engine version's values, as the simulation uses them."""

    name: str
    version: str
    host_overlap: bool
    host_constant_s: float
    host_per_seq_s: float
    join_after_next: bool
    multi_step: int
    front_end_constant_s: float
    front_end_per_prompt_token_s: float
    token_hop_s: float
    kv_admission: str
    prefill_only_steps: bool = False
    finished_extra_steps: int = 0

    @property
    def label(self) -> str:
        """``name@version``, as summary.json and the report give it."""
        return f"{self.name}{SEPARATOR}{self.version}"


def load_presets(path: Path) -> EnginesFile:
    """The presets of ``path``; a value that is missing, negative or without a source
    is a ``ScenarioError`` naming the file, line and field."""
    from sim.config.yamlio import load_model_fast
    return load_model_fast(path, EnginesFile, kind="engine presets")


@lru_cache(maxsize=None)
def shipped() -> dict[str, EngineEntry]:
    """The presets shipped in ``profiles/engines.yaml``."""
    return load_presets(data_dir("profiles") / ENGINES_FILE).engines


def parse(ref: str) -> tuple[str, str | None]:
    """``vllm`` -> ('vllm', None); ``vllm@v0`` -> ('vllm', 'v0')."""
    name, sep, version = ref.partition(SEPARATOR)
    return name, (version if sep else None)


def resolve(ref: str, inline: dict[str, EngineEntry] | None = None) -> EnginePreset | str:
    """The preset ``ref`` names (``name`` or ``name@version``), with the scenario's own
    engines over the shipped ones; else why not, naming the known ones."""
    engines = {**shipped(), **(inline or {})}
    name, version = parse(ref)
    entry = engines.get(name)
    if entry is None:
        known = ", ".join(sorted(engines))
        return f"unknown engine '{name}'; known engines: {known}"
    version = entry.default if version is None else version
    preset = entry.versions.get(version)
    if preset is None:
        known = ", ".join(f"{name}{SEPARATOR}{v}" for v in entry.versions)
        return (f"unknown version '{version}' of engine '{name}'; known: {known} "
                f"(`engine: {name}` runs {name}{SEPARATOR}{entry.default})")
    return EnginePreset(
        name=name, version=version, host_overlap=preset.host_mode.value == "overlap",
        host_constant_s=preset.host_constant_s.value, host_per_seq_s=preset.host_per_seq_s.value,
        join_after_next=preset.join.value == "after_next", multi_step=preset.multi_step.value,
        front_end_constant_s=preset.front_end_constant_s.value,
        front_end_per_prompt_token_s=preset.front_end_per_prompt_token_s.value,
        token_hop_s=preset.token_hop_s.value, kv_admission=preset.kv_admission.value,
        prefill_only_steps=preset.prefill_only_steps.value,
        finished_extra_steps=preset.finished_extra_steps.value)


@dataclass(frozen=True)
class FrontEnd:
    """A request's way in (before it can be scheduled) and its tokens' way out."""

    constant_s: float = 0.0
    per_prompt_token_s: float = 0.0
    token_hop_s: float = 0.0

    def entry_s(self, prompt_tokens: int) -> float:
        return self.constant_s + self.per_prompt_token_s * prompt_tokens

    @property
    def active(self) -> bool:
        return self.constant_s > 0.0 or self.per_prompt_token_s > 0.0


def front_end(preset: EnginePreset, override_s: float | None = None,
              measured_on_engine: bool = False) -> FrontEnd:
    """A pool's front end: its own ``front_end`` (the whole front end, no separate hop),
    else none when the step times were measured on the whole engine (they hold it),
    else the preset's."""
    if override_s is not None:
        return FrontEnd(float(override_s))
    if measured_on_engine:
        return FrontEnd()
    return FrontEnd(preset.front_end_constant_s, preset.front_end_per_prompt_token_s,
                    preset.token_hop_s)
