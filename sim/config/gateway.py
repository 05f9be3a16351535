"""Gateway configuration: API keys, team limits, the model registry and routes."""
from __future__ import annotations

import math

from pydantic import Field, model_validator

from sim.config.common import Bytes, BytesPerS, Name, PositiveSeconds, Seconds, StrictModel
from sim.config.specs import DType


class KeyConfig(StrictModel):
    team: Name = Field(description="Team the key belongs to")
    revoked_at: Seconds | None = Field(None, description="Time from which the key is refused")


class BudgetConfig(StrictModel):
    tokens: float | None = Field(None, gt=0, description="Prompt + output tokens per period")
    usd: float | None = Field(None, gt=0, description="US dollars per period")
    period: PositiveSeconds = Field(86400.0, description="Budget window, e.g. 1d")

    @model_validator(mode="after")
    def _one_limit(self) -> "BudgetConfig":
        if (self.tokens is None) == (self.usd is None):
            raise ValueError("give exactly one of `tokens` and `usd`")
        return self


class TeamConfig(StrictModel):
    requests_per_min: float | None = Field(None, gt=0, description="Token bucket on requests")
    tokens_per_min: float | None = Field(
        None, gt=0, description="Token bucket on prompt + max output tokens")
    max_concurrency: int | None = Field(None, gt=0, description="Requests in flight at once")
    budget: BudgetConfig | None = Field(None, description="Spend limit per period")
    max_priority: int | None = Field(
        None, ge=-1_000_000, le=1_000_000, description="Most urgent priority the team may use (lower is more urgent); "
                          "requests asking for more are lowered to it")
    weight: float = Field(1.0, gt=0, description="Fair-share weight in pool queues")


class CascadeConfig(StrictModel):
    first: Name = Field(description="Pool that tries first (the small model)")
    then: Name = Field(description="Pool that gets the escalated share (the large model)")
    escalation: float = Field(gt=0, le=1, description="Share escalated after the first "
                              "attempt (above 0: with none, route with `pools:`)")

    @model_validator(mode="after")
    def _check_pools(self) -> "CascadeConfig":
        if self.first == self.then:
            raise ValueError(f"a cascade escalates to another pool; first and then are both "
                             f"'{self.first}'")
        return self


class LengthRouteConfig(StrictModel):
    """Route by request class: short prompts to one pool, long ones to another."""

    threshold_tokens: int = Field(gt=0, description="Prompts at or above this are long")
    short: Name = Field(description="Pool for prompts below the threshold")
    long: Name = Field(description="Pool for prompts at or above the threshold")


class DisaggregatedConfig(StrictModel):
    """Prefill on one pool, decode on another, with the KV cache sent between."""

    prefill: Name = Field(description="Pool that computes prompts and the first token")
    decode: Name = Field(description="Pool that generates the remaining tokens")
    link_bandwidth: BytesPerS = Field("50GB/s", description="KV transfer bandwidth")
    link_latency: Seconds = Field("1ms", description="Fixed cost of one KV transfer")


class ServedModelConfig(StrictModel):
    """One name the gateway serves (a model, ``model@version``, a variant)."""

    pools: dict[Name, float] = Field(
        default_factory=dict, description="Pool -> weight (a canary split when several)")
    cascade: CascadeConfig | None = Field(None, description="Small model first, then escalate")
    by_prompt_length: LengthRouteConfig | None = Field(
        None, description="Route short and long prompts to different pools")
    disaggregated: DisaggregatedConfig | None = Field(
        None, description="Separate prefill and decode pools")
    quality: float | None = Field(None, ge=0, le=1, description="Quality score of this variant")
    weight_dtype: DType | None = Field(
        None, description="Quantisation of this variant; its pools must use it")
    hardware: list[Name] | None = Field(None, min_length=1,
                                        description="GPU kinds it may run on (unset: any)")
    min_tp: int | None = Field(None, gt=0, description="Fewest GPUs per replica it needs")
    min_gpu_memory: Bytes | None = Field(None, description="Least memory per GPU it needs")
    teams: list[Name] | None = Field(None, min_length=1,
                                     description="Only these teams may call it (unset: any)")
    usd_per_million_input_tokens: float = Field(
        0.0, ge=0, le=1_000_000, description="Price charged to budgets (at most $1,000,000)")
    usd_per_million_output_tokens: float = Field(
        0.0, ge=0, le=1_000_000, description="Price charged to budgets (at most $1,000,000)")

    def entry_pools(self) -> list[str]:
        """The pools a request for this name may be sent to first."""
        if self.cascade is not None:
            return [self.cascade.first]
        if self.by_prompt_length is not None:
            return [self.by_prompt_length.short, self.by_prompt_length.long]
        if self.disaggregated is not None:
            return [self.disaggregated.prefill]
        return list(self.pools)

    @model_validator(mode="after")
    def _one_route(self) -> "ServedModelConfig":
        routes = [bool(self.pools), self.cascade is not None, self.by_prompt_length is not None,
                  self.disaggregated is not None]
        if sum(routes) != 1:
            raise ValueError("give exactly one of `pools` (with weights), `cascade`, "
                             "`by_prompt_length` and `disaggregated`")
        if any(w <= 0 for w in self.pools.values()):
            raise ValueError("pool weights must be greater than 0")
        if not math.isfinite(sum(self.pools.values())):
            raise ValueError("pool weights must add up to a finite number (they are "
                             "relative: 1 and 3 split a quarter and three quarters)")
        return self


class GatewayConfig(StrictModel):
    keys: dict[Name, KeyConfig] = Field(
        default_factory=dict, description="API key id -> team; when any is given, every "
                                          "request must carry a valid key")
    teams: dict[Name, TeamConfig] = Field(default_factory=dict, description="Limits per team")
    models: dict[Name, ServedModelConfig] = Field(
        default_factory=dict, description="Served model names and where they run")
    aliases: dict[Name, Name] = Field(default_factory=dict,
                                    description="Alias -> served model name")

    @property
    def active(self) -> bool:
        return bool(self.keys or self.teams or self.models or self.aliases)

    def served_name(self, model: str | None) -> str | None:
        """The served name a request for ``model`` asks for (an alias resolved)."""
        return self.aliases.get(model, model) if model else None

    def route_for(self, model: str | None, pool: str | None) -> ServedModelConfig | None:
        """The served model whose route a stream's requests follow: none when the stream
        names its pool (it goes there) or a model the gateway does not list."""
        if pool is not None:
            return None
        name = self.served_name(model)
        return self.models.get(name) if name is not None else None
