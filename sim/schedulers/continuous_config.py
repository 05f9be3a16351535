"""The continuous scheduler's settings: ``BatchLimits``, the limits and policies of the
continuous step that every scheduler built on it shares (``continuous``, ``speculative``),
and ``ContinuousConfig``, the ``continuous`` policy's config."""
from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from sim.config.common import Flag, PositiveInt, PositiveSeconds
from sim.schedulers.base import Problem, SchedulerConfigBase


class BatchLimits(SchedulerConfigBase):
    """The limits and policies of the continuous step, shared by every scheduler built on
    it (``continuous``, ``speculative``)."""

    max_num_batched_tokens: PositiveInt = Field(
        8192, description="Token budget of one step (prefill chunks + decode tokens, draft "
                          "tokens included)")
    max_num_seqs: PositiveInt = Field(256, description="Most sequences in one step")
    chunked_prefill: Flag = Field(True, description="Split long prompts across steps")
    long_prefill_token_threshold: PositiveInt | None = Field(
        None, description="Largest prefill chunk one request may take in a step (keeps a "
                          "long prompt from filling the budget and stalling decodes)")
    policy: Literal["fcfs", "priority"] = Field(
        "fcfs", description="Waiting order and preemption victim: arrival order, or request "
                            "priority (lower first; the victim is the largest priority, "
                            "latest arrival)")
    priority_aging: PositiveSeconds | None = Field(
        None, description="Starvation guard for the priority policy: a waiting request "
                          "gains one priority level per this much waiting")
    kv_admission: Literal["on_demand", "whole_prompt", "guaranteed_no_evict",
                          "estimated_output"] | None = Field(
        None, description="on_demand (vLLM before its full-prompt gate): KV "
                          "blocks are taken as tokens are computed and a request is "
                          "preempted when they run out; estimated_output (SGLang's "
                          "PrefillAdder): the same, but a waiting request is admitted only "
                          "when the free KV holds its prompt and output to come beside a "
                          "share (SGLang's new_token_ratio) of every running request's "
                          "output to come (schedulers/output_estimate.py); whole_prompt (vLLM 0.32's "
                          "scheduler_reserve_full_isl, on by default there): the same, but "
                          "a waiting request is admitted only when the free blocks hold "
                          "its whole prompt (less its prefix-cache hit), not only its "
                          "first chunk; guaranteed_no_evict (TensorRT-LLM's default capacity "
                          "scheduler): a request is admitted only when the cache can "
                          "hold its whole prompt and output beside every running "
                          "request's, so none is ever preempted; unset: the pool's "
                          "engine's")
    max_new_tokens: PositiveInt | None = Field(
        None, description="The clients' cap on a request's output tokens (their max_tokens), "
                          "which kv_admission estimated_output reserves room for; unset: "
                          "4,096, SGLang's estimate of an uncapped request")
    prefill_only_steps: bool | None = Field(
        None, description="true: a step that prefills runs no decode, the running decodes "
                          "wait for it (vLLM V0's default scheduler, without chunked "
                          "prefill; SGLang unless --enable-mixed-chunk); false: prefill "
                          "chunks and decodes share a step (vLLM V1, TensorRT-LLM's "
                          "in-flight batching); unset: the pool's engine's")
    finished_extra_step: bool | None = Field(
        None, description="true: a request whose last token came with step k decodes once "
                          "more in step k+1 (its token thrown away), keeping its batch slot "
                          "and KV blocks to k+1's end, as a scheduler that forms step k+1 "
                          "before reading step k's tokens does (vLLM async scheduling and "
                          "V0's async output processing, SGLang's and TensorRT-LLM's overlap "
                          "schedulers); false: it leaves at k's end; unset: the pool's "
                          "engine's")

    @model_validator(mode="after")
    def _check_limits(self) -> "BatchLimits":
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be "
                             f"at least max_num_seqs ({self.max_num_seqs})")
        if self.long_prefill_token_threshold is not None and not self.chunked_prefill:
            raise ValueError("long_prefill_token_threshold caps prefill chunks, and "
                             "chunked_prefill: false takes none: remove one of them")
        if self.long_prefill_token_threshold is not None and \
                self.long_prefill_token_threshold >= self.max_num_batched_tokens:
            raise ValueError(f"long_prefill_token_threshold ({self.long_prefill_token_threshold})"
                             f" is not below max_num_batched_tokens "
                             f"({self.max_num_batched_tokens}): it would never cap a chunk")
        if self.priority_aging is not None and self.policy != "priority":
            raise ValueError("priority_aging ages priorities, which policy 'fcfs' ignores: "
                             "add policy: priority or remove priority_aging")
        return self

    def with_engine(self, engine, measured_on_engine: bool = False) -> "BatchLimits":
        """The engine's KV admission, prefill-only steps and finished request's extra step
        where these settings leave them unset (``null``, the default); no extra step when
        the step times were measured on the whole engine (as with its join rule: the
        measured engine's own pipelining holds it)."""
        update = {}
        if self.kv_admission is None:
            update["kv_admission"] = engine.kv_admission
        if self.prefill_only_steps is None:
            update["prefill_only_steps"] = engine.prefill_only_steps
        if self.finished_extra_step is None:
            update["finished_extra_step"] = (engine.finished_extra_steps == 1
                                             and not measured_on_engine)
        return self.model_copy(update=update) if update else self

    def problems(self, engine, duration_s: float) -> list[Problem]:
        admission = self.kv_admission or engine.kv_admission
        if self.max_new_tokens is not None and admission != "estimated_output":
            return [(("max_new_tokens",), f"max_new_tokens is the cap kv_admission "
                     f"estimated_output reserves room for; this pool admits {admission} "
                     f"(engine {engine.name}@{engine.version}), which never reads it: remove it or set "
                     "kv_admission: estimated_output")]
        return []


class ContinuousConfig(BatchLimits):
    type: Literal["continuous"] = "continuous"
    engine_terms_apply: ClassVar[bool] = True
    exact_steps: Flag = Field(
        False, description="Simulate every decode step instead of fast-forwarding identical ones")
