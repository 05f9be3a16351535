"""Typed configuration of the offered load: which request streams arrive, how
often, and how long their prompts and answers are.

A workload is a set of named streams. Each stream has an arrival process
(``arrival:``) and, unless it replays a trace, two length distributions
(``prompt_tokens:``, ``output_tokens:``). Policy blocks are discriminated on
their ``type:`` key so a misspelt type is reported together with the valid
choices. Shorthands keep simple scenarios short: a bare rate (``rate: 5/s``)
is a constant rate and a bare integer (``output_tokens: 256``) is a fixed
length.

Rate profiles are functions of run time (seconds since the start of the
run); a stream's ``start``/``end`` only cut a window out of them. The
numbers are turned into arrays by :mod:`sim.workload`.
"""
from __future__ import annotations

import itertools
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BeforeValidator, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from sim.config import units
from sim.config.retry import RetryPolicy
from sim.config.trace_layouts import TRACE_FORMATS, TraceLayout, format_choices
from sim.config.common import (
    FilePath,
    Flag,
    Name,
    PositiveRatePerS,
    PositiveSeconds,
    RatePerS,
    Seconds,
    StrictModel,
)
from sim.config.lengths import MAX_TOKENS, LengthConfig
from sim.config.sessions import SessionConfig

# Phase of a sinusoid may be negative, so it does not use ``Seconds``.
SignedSeconds = Annotated[float, BeforeValidator(units.seconds, json_schema_input_type=Union[float, str])]


# --------------------------------------------------------------------------
# Rate over time
# --------------------------------------------------------------------------

class ConstantRateConfig(StrictModel):
    """The same request rate for the whole run."""

    type: Literal["constant"] = Field(description="Constant rate.")
    value: PositiveRatePerS = Field(
        description="Requests per second (or a unit string such as '300/min').")


class PiecewiseRateConfig(StrictModel):
    """A rate that holds from each listed time until the next one.

    The last rate holds until the end of the run. A rate of 0 switches the
    stream off for that segment.
    """

    type: Literal["piecewise"] = Field(description="Piecewise-constant rate.")
    points: list[tuple[Seconds, RatePerS]] = Field(
        min_length=1,
        description="[[time, rate], ...] in run time; the first time must be 0, times "
                    "strictly increase, rates are >= 0 and at least one is > 0.")

    @field_validator("points")
    @classmethod
    def _check_points(cls, points: list[tuple[float, float]]) -> list[tuple[float, float]]:
        times_s = [t for t, _ in points]
        if times_s[0] != 0:
            raise ValueError(f"the first point must be at time 0, got {times_s[0]}")
        for i in range(1, len(times_s)):
            if not times_s[i] > times_s[i - 1]:
                raise ValueError(f"times must strictly increase; point {i} has time "
                                 f"{times_s[i]} after {times_s[i - 1]}")
        if not any(r > 0 for _, r in points):
            raise ValueError("at least one rate must be greater than 0")
        return points


MAX_SPAN_S = 10 * 365 * 86400.0


class SinusoidalRateConfig(StrictModel):
    """A daily-cycle style rate: mean + amplitude * sin(2*pi*(t - phase)/period)."""

    type: Literal["sinusoidal"] = Field(description="Sinusoidally varying rate.")
    mean: PositiveRatePerS = Field(description="Average rate (requests per second).")
    amplitude: RatePerS = Field(
        description="Peak deviation from the mean; at most the mean so the rate is never "
                    "negative.")
    # a cycle of at least a millisecond, a shift within ten years: past them the sine's
    # argument loses every digit (a 1e300 s phase gave NaN rates and no arrival)
    period: PositiveSeconds = Field(ge=1e-3, le=MAX_SPAN_S,
                                    description="Length of one cycle (1 ms to 10 years).")
    phase: SignedSeconds = Field(
        default=0.0, ge=-MAX_SPAN_S, le=MAX_SPAN_S,
        description="Time shift: the rate crosses the mean going up at t=phase (at most 10 "
                    "years either way).")

    @model_validator(mode="after")
    def _check_amplitude(self) -> "SinusoidalRateConfig":
        if self.amplitude > self.mean:
            raise ValueError(f"amplitude ({self.amplitude}) must not exceed mean "
                             f"({self.mean}): the rate would go negative")
        return self


def _rate_shorthand(value: Any) -> Any:
    """A bare number or unit string means a constant rate."""
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return {"type": "constant", "value": value}
    return value


_RATES = Annotated[Union[ConstantRateConfig, PiecewiseRateConfig, SinusoidalRateConfig],
                   Field(discriminator="type")]
RateConfig = Annotated[
    Union[ConstantRateConfig, PiecewiseRateConfig, SinusoidalRateConfig],
    Field(discriminator="type"),
    # (the schema: a number or a unit string is a constant rate)
    BeforeValidator(_rate_shorthand, json_schema_input_type=Union[float, str, _RATES]),
]


# --------------------------------------------------------------------------
# Arrival processes
# --------------------------------------------------------------------------

class PoissonArrivalConfig(StrictModel):
    """Independent arrivals: exponential gaps at the (possibly time-varying) rate."""

    type: Literal["poisson"] = Field(description="Poisson process.")
    rate: RateConfig = Field(
        description="Arrival rate: a number/unit string ('5/s') or a piecewise/sinusoidal "
                    "block.")


class GammaArrivalConfig(StrictModel):
    """Renewal process with gamma gaps, for traffic burstier (cv > 1) or smoother
    (cv < 1) than Poisson at the same mean rate."""

    type: Literal["gamma"] = Field(description="Gamma renewal process.")
    rate: RateConfig = Field(
        description="Arrival rate: a number/unit string ('5/s') or a piecewise/sinusoidal "
                    "block.")
    cv: float = Field(
        ge=0.001, le=100, description="Coefficient of variation of the gaps: 1 is Poisson, "
                                      ">1 bursty; from 0.001 (nearly even gaps) to 100")


class TraceColumnsConfig(StrictModel):
    """Which columns of a CSV trace hold the arrival time and the lengths."""

    timestamp: Name = Field("timestamp", description="Column of arrival times.")
    prompt_tokens: Name = Field("prompt_tokens", description="Column of prompt lengths.")
    output_tokens: Name = Field("output_tokens", description="Column of output lengths.")

    @model_validator(mode="after")
    def _distinct(self) -> "TraceColumnsConfig":
        roles = {"timestamp": self.timestamp, "prompt_tokens": self.prompt_tokens,
                 "output_tokens": self.output_tokens}
        for (role, column), (other, also) in itertools.combinations(roles.items(), 2):
            if column == also:
                raise ValueError(f"column '{column}' is named for both {role} and {other}; "
                                 "each must be a column of its own")
        return self


MOONCAKE_BLOCK_TOKENS = 512


class TraceArrivalConfig(StrictModel):
    """Replay recorded requests from a trace file (gzip-compressed when its name ends in
    ``.gz``):

    * ``format: csv`` (the default): a CSV whose ``columns`` (default ``timestamp``,
      ``prompt_tokens``, ``output_tokens``) hold the arrival time in ``timestamp_unit``
      (``s`` by default, ``ms``, ``us``, or ``datetime`` for dates and times) and the
      lengths;
    * ``format: azure``: the Azure LLM inference traces (``TIMESTAMP`` as a date and time,
      ``ContextTokens``, ``GeneratedTokens``);
    * ``format: mooncake``: the Mooncake traces, one JSON object a line (``timestamp`` in
      ms, ``input_length``, ``output_length``);
    * a format registered in :mod:`sim.config.trace_layouts` (docs/recipes.md).

    Times are offsets from the trace's first request (numbers as written: non-negative,
    non-decreasing), placed after the stream's ``start``. The lengths come from the file,
    so the stream must not give its own length distributions.
    """

    type: Literal["trace"] = Field(description="Trace replay.")
    path: FilePath = Field(
        description="Trace file; a relative path is read from the scenario file's folder.")
    format: str = Field(
        "csv", description="The file's layout: csv (columns below), azure, mooncake, or a "
                           "format registered since (sim.config.trace_layouts).",
        json_schema_extra=lambda schema: schema.update(enum=list(TRACE_FORMATS)))
    columns: TraceColumnsConfig | None = Field(
        None, description="format csv: the columns' names (default timestamp, "
                          "prompt_tokens, output_tokens).")
    timestamp_unit: Literal["s", "ms", "us", "datetime"] | None = Field(
        None, description="format csv: the unit of the timestamps (default s).")
    time_scale: float = Field(
        default=1.0, ge=1e-6, le=1e6,
        description="Multiplies every timestamp: 0.5 replays twice as fast (from 1e-6 to "
                    "1e6).")
    loop: Flag = Field(
        default=False,
        description="Repeat the trace to fill the run; each copy is shifted by the last "
                    "timestamp plus one mean gap.")
    block_tokens: Optional[int] = Field(
        default=None, ge=1, le=1_000_000,
        description="format mooncake: tokens in each block its hash_ids name (default "
                    "512, as the Mooncake traces have them).")

    @field_validator("format")
    @classmethod
    def _registered(cls, value: str) -> str:
        if value not in TRACE_FORMATS:      # worded as a Literal's refusal, with the choices
            raise PydanticCustomError("literal_error", "Input should be {expected}",
                                      {"expected": format_choices()})
        return value

    @property
    def layout(self) -> TraceLayout:
        """Where this format keeps a row's values, and how it is read."""
        return TRACE_FORMATS[self.format]

    @model_validator(mode="after")
    def _csv_only(self) -> "TraceArrivalConfig":
        for name in ("columns", "timestamp_unit"):
            if getattr(self, name) is not None and not self.layout.configurable:
                raise ValueError(f"`{name}:` describes a CSV trace's layout; format "
                                 f"{self.format!r} has its own: remove it")
        if self.block_tokens is not None and self.layout.ids_field is None:
            raise ValueError("`block_tokens:` is the length of the blocks a Mooncake "
                             "trace's hash_ids name; this format has none: remove it")
        return self

    @property
    def id_block_tokens(self) -> int:
        """Tokens in each block a Mooncake trace's hash_ids name."""
        return self.block_tokens if self.block_tokens is not None else MOONCAKE_BLOCK_TOKENS


class ClosedArrivalConfig(StrictModel):
    """A fixed number of clients, each sending its next request as soon as its last one
    ends (a benchmark at fixed concurrency: vLLM's ``bench serve --max-concurrency``,
    genai-perf's concurrency mode; or users who wait for each answer and think before the
    next). All ``concurrency`` clients send at the stream's ``start``; a client stops when
    the stream's ``requests`` are all sent (when given) or the stream's window ends."""

    type: Literal["closed"] = Field(description="Closed loop at fixed concurrency.")
    concurrency: int = Field(gt=0, le=1_000_000,
                             description="Clients, each with one request in flight.")
    requests: Optional[int] = Field(
        default=None, gt=0, le=10_000_000,
        description="Requests the clients send in all (a refused one counts; its client "
                    "pauses 10 ms before the next); null: as many as they can until the "
                    "stream's window ends.")
    think_time: Seconds = Field(
        default=0.0, description="A client's pause between the end of one request and "
                                 "the next.")


ArrivalConfig = Annotated[
    Union[PoissonArrivalConfig, GammaArrivalConfig, TraceArrivalConfig, ClosedArrivalConfig],
    Field(discriminator="type"),
]


# --------------------------------------------------------------------------
# Streams and the workload
# --------------------------------------------------------------------------

class PrefixConfig(StrictModel):
    """A shared prompt prefix (a system prompt) that prefix caching can reuse."""

    tokens: int = Field(gt=0, le=MAX_TOKENS, description="Length of the shared prefix, "
                                                         "before the sampled prompt tokens")
    groups: int = Field(default=1, gt=0, le=MAX_TOKENS,
                        description="Distinct prefixes; each request uses one at random")


class StreamConfig(StrictModel):
    """One source of requests: who sends them, where to, how often, how long."""

    team: Name = Field(default="default", description="Team the requests are billed to.")
    model: Optional[Name] = Field(default=None, description="Model name the stream calls.")
    pool: Optional[Name] = Field(
        default=None, description="Send straight to this pool instead of routing by model.")
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000,
                          description="Scheduling priority; lower is more urgent.")
    api_key: Optional[Name] = Field(
        default=None, description="API key id the client sends (see gateway.keys).")
    retry: Optional[RetryPolicy] = Field(
        default=None, description="Client retries after 429/503 (backoff with jitter); "
                                  "unset = no retries.")
    arrival: ArrivalConfig = Field(
        description="Arrival process (poisson, gamma, trace or closed).")
    prompt_tokens: Optional[LengthConfig] = Field(
        default=None,
        description="Prompt length distribution; required unless the arrival is a trace.")
    output_tokens: Optional[LengthConfig] = Field(
        default=None,
        description="Output length distribution; required unless the arrival is a trace.")
    prefix: Optional[PrefixConfig] = Field(
        default=None, description="Shared prompt prefix (adds its tokens to every prompt).")
    prompt_format: Literal["text", "token_ids"] = Field(
        default="text",
        description="What the client sends: text, which the engine's front end tokenises "
                    "(its cost per prompt token), or token_ids (as MLPerf harnesses and "
                    "vLLM's offline benchmarks do), which skip it.")
    sessions: Optional[SessionConfig] = Field(
        default=None, description="Multi-turn conversations: each arrival starts one, "
                                  "whose turns follow its answers (poisson or gamma "
                                  "arrivals).")
    start: Seconds = Field(default=0.0, description="Run time at which the stream starts.")
    end: Optional[Seconds] = Field(
        default=None, description="Run time at which the stream stops; null for the end "
                                  "of the run.")

    @model_validator(mode="after")
    def _check_lengths_and_window(self) -> "StreamConfig":
        given = [k for k in ("prompt_tokens", "output_tokens") if getattr(self, k) is not None]
        if isinstance(self.arrival, TraceArrivalConfig):
            if given:
                raise ValueError(
                    f"a stream with a trace arrival takes its lengths from the trace; "
                    f"remove {' and '.join(given)}")
        else:
            missing = [k for k in ("prompt_tokens", "output_tokens") if k not in given]
            if missing:
                raise ValueError(f"{' and '.join(missing)} required for a "
                                 f"{self.arrival.type} arrival")
        if self.sessions is not None and self.arrival.type not in ("poisson", "gamma"):
            raise ValueError(f"sessions: conversations start at a poisson or gamma stream's "
                             f"arrivals; a {self.arrival.type} arrival cannot start them")
        if self.end is not None and not self.end > self.start:
            raise ValueError(f"end ({self.end}) must be after start ({self.start})")
        return self


class WorkloadConfig(StrictModel):
    """All request streams offered to the fleet."""

    streams: dict[Name, StreamConfig] = Field(
        description="Stream name -> stream; order fixes the stream index and seeding.")
    rate_scale: float = Field(
        default=1.0, gt=0, le=1e6,
        description="Multiplies every stream's rate (traces replay faster), for load "
                    "sweeps; a closed-loop stream's load is its concurrency, not scaled.")

    @field_validator("streams")
    @classmethod
    def _check_streams(cls, streams: dict[str, StreamConfig]) -> dict[str, StreamConfig]:
        if not streams:
            raise ValueError("workload has no streams")
        return streams
