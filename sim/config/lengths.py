"""Length distributions of prompts and answers (tokens): their typed configuration, and
the fewest and most tokens each can draw, read from the configuration alone (None where
only a data file knows, or a distribution is unbounded)."""
from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BeforeValidator, Field, model_validator

from sim.config.common import FilePath, StrictModel

# A request longer than this fits no model (the longest contexts are a few million).
MAX_TOKENS = 100_000_000
TokenCount = Annotated[int, Field(ge=1, le=MAX_TOKENS)]


class FixedLengthConfig(StrictModel):
    """Every request has the same length."""

    type: Literal["fixed"] = Field(description="Fixed length.")
    value: TokenCount = Field(description="Length in tokens.")


class UniformLengthConfig(StrictModel):
    """Integers drawn uniformly from [low, high], both ends included."""

    type: Literal["uniform"] = Field(description="Uniform integer length.")
    low: TokenCount = Field(description="Smallest length (tokens).")
    high: TokenCount = Field(description="Largest length (tokens), included.")

    @model_validator(mode="after")
    def _check_bounds(self) -> "UniformLengthConfig":
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be at least low ({self.low})")
        return self


class _ClippedLength(StrictModel):
    """Bounds shared by continuous distributions, applied after rounding."""

    min: TokenCount = Field(default=1, description="Smallest length after clipping.")
    max: Optional[TokenCount] = Field(
        default=None, description="Largest length after clipping; null for no limit.")

    @model_validator(mode="after")
    def _check_bounds(self) -> "_ClippedLength":
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be at least min ({self.min})")
        # more than half of the draws clipped to one bound: the distribution is that bound
        median = self.median()
        if self.max is not None and median > self.max + 0.5:
            raise ValueError(f"max ({self.max}) is below the median ({median:.4g}): more than "
                             f"half of the draws would be {self.max}; lower mean (or cv) "
                             "or raise max")
        if median < self.min - 0.5:
            raise ValueError(f"min ({self.min}) is above the median ({median:.4g}): more than "
                             f"half of the draws would be {self.min}; raise mean (or lower "
                             "cv) or lower min")
        return self

    def median(self) -> float:
        """The unclipped distribution's median (tokens)."""
        raise NotImplementedError


class LognormalLengthConfig(_ClippedLength):
    """Right-skewed lengths, the usual fit for prompts and answers.

    ``mean`` and ``cv`` describe the unclipped distribution; samples are
    rounded to integers and clipped to [min, max].
    """

    type: Literal["lognormal"] = Field(description="Lognormal length.")
    mean: float = Field(gt=0, le=MAX_TOKENS,
                        description="Mean length in tokens (before clipping).")
    cv: float = Field(gt=0, le=100, description="Coefficient of variation (std / mean); "
                                                "at most 100.")

    def median(self) -> float:
        return self.mean / math.sqrt(1.0 + self.cv ** 2)


class ExponentialLengthConfig(_ClippedLength):
    """Memoryless lengths; rounded to integers and clipped to [min, max]."""

    type: Literal["exponential"] = Field(description="Exponential length.")
    mean: float = Field(gt=0, le=MAX_TOKENS,
                        description="Mean length in tokens (before clipping).")

    def median(self) -> float:
        return self.mean * math.log(2.0)


# Shipped traces whose lengths a length distribution may resample (scenarios/traces/):
# preset -> (file, format, which length)
PRESETS = {
    "azure-2023-conv-prompt": ("azure-2023-conv.csv.gz", "azure", "prompt"),
    "azure-2023-conv-output": ("azure-2023-conv.csv.gz", "azure", "output"),
    "azure-2023-code-prompt": ("azure-2023-code.csv.gz", "azure", "prompt"),
    "azure-2023-code-output": ("azure-2023-code.csv.gz", "azure", "output"),
    "mooncake-conversation-prompt": ("mooncake-conversation.jsonl.gz", "mooncake", "prompt"),
    "mooncake-conversation-output": ("mooncake-conversation.jsonl.gz", "mooncake", "output"),
}


class EmpiricalLengthConfig(StrictModel):
    """Resample observed lengths (with replacement): listed inline, read from one column
    of a CSV file, or a shipped production trace's (``preset``)."""

    type: Literal["empirical"] = Field(description="Empirical length distribution.")
    values: Optional[list[TokenCount]] = Field(
        default=None, min_length=1, description="Observed lengths (tokens).")
    weights: Optional[list[Annotated[float, Field(ge=0)]]] = Field(
        default=None,
        description="Relative weight of each value (same length as values); equal if "
                    "omitted.")
    path: Optional[FilePath] = Field(
        default=None,
        description="CSV file to read lengths from; relative to the scenario file's folder.")
    column: Optional[str] = Field(
        default=None, min_length=1, description="Column of the CSV file holding lengths.")
    preset: Optional[Literal[tuple(PRESETS)]] = Field(
        default=None, description="The lengths of a shipped production trace: "
                                  + ", ".join(PRESETS) + ".")

    @model_validator(mode="after")
    def _check_source(self) -> "EmpiricalLengthConfig":
        sources = [self.values is not None, self.path is not None, self.preset is not None]
        if sum(sources) != 1:
            raise ValueError("give exactly one of 'values', 'path' or 'preset'")
        if self.preset is not None:
            if self.column is not None or self.weights is not None:
                raise ValueError("a preset is the trace's own lengths: no 'column' or "
                                 "'weights'")
            return self
        if self.path is not None:
            if self.column is None:
                raise ValueError("'column' is required with 'path'")
            if self.weights is not None:
                raise ValueError("'weights' can only be used with 'values'")
        else:
            if self.column is not None:
                raise ValueError("'column' can only be used with 'path'")
            if self.weights is not None:
                if len(self.weights) != len(self.values):
                    raise ValueError(f"'weights' has {len(self.weights)} entries but "
                                     f"'values' has {len(self.values)}")
                if not sum(self.weights) > 0:
                    raise ValueError("'weights' must not all be 0")
                if not math.isfinite(sum(self.weights)):
                    raise ValueError("'weights' sum to more than the largest number; they "
                                     "are relative: scale them down")
        return self


class MixtureComponentConfig(StrictModel):
    """One branch of a mixture: with probability ~weight, draw from dist."""

    weight: float = Field(gt=0, description="Relative weight (normalised over components).")
    dist: "LengthConfig" = Field(description="Length distribution of this component.")


class MixtureLengthConfig(StrictModel):
    """Several populations in one stream, e.g. short chat turns plus long documents."""

    type: Literal["mixture"] = Field(description="Mixture of length distributions.")
    components: list[MixtureComponentConfig] = Field(
        min_length=1, description="Components with their weights.")

    @model_validator(mode="after")
    def _finite_weights(self) -> "MixtureLengthConfig":
        if not math.isfinite(sum(c.weight for c in self.components)):
            raise ValueError("the components' weights must add up to a finite number (they "
                             "are relative: 1 and 3 split a quarter and three quarters)")
        return self


def _length_shorthand(value: Any) -> Any:
    """A bare integer means a fixed length."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"type": "fixed", "value": value}
    return value


_LENGTHS = Annotated[Union[FixedLengthConfig, UniformLengthConfig, LognormalLengthConfig,
                           ExponentialLengthConfig, EmpiricalLengthConfig, MixtureLengthConfig],
                     Field(discriminator="type")]
LengthConfig = Annotated[
    Union[FixedLengthConfig, UniformLengthConfig, LognormalLengthConfig,
          ExponentialLengthConfig, EmpiricalLengthConfig, MixtureLengthConfig],
    Field(discriminator="type"),
    # (the schema: a whole number is a fixed length)
    BeforeValidator(_length_shorthand, json_schema_input_type=Union[int, _LENGTHS]),
]

MixtureComponentConfig.model_rebuild()





def bounds(length) -> tuple[int | None, int | None]:
    """The fewest and most tokens a length distribution can draw; None where only its
    data file knows (an empirical column read from a CSV) or, for the most, where the
    distribution is unbounded."""
    kind = getattr(length, "type", None)
    if kind == "fixed":
        return length.value, length.value
    if kind == "uniform":
        return length.low, length.high
    if kind in ("lognormal", "exponential"):
        return length.min, length.max
    if kind == "empirical":
        return (min(length.values), max(length.values)) if length.values else (None, None)
    if kind == "mixture":
        each = [bounds(c.dist) for c in length.components]
        lows, highs = [lo for lo, _ in each], [hi for _, hi in each]
        return (None if None in lows else min(lows), None if None in highs else max(highs))
    return None, None


def shortest(length) -> int | None:
    return bounds(length)[0]


def longest(length) -> int | None:
    return bounds(length)[1]


def prompt_range(stream) -> tuple[int | None, int | None]:
    """The fewest and most prompt tokens (its shared prefix included) ``stream`` sends;
    None where unknown before its data is read (or, for a conversation's turns, which
    grow, the most past the first turn's unless a context window bounds them)."""
    if stream.prompt_tokens is None:
        return None, None
    prefix = stream.prefix.tokens if stream.prefix is not None else 0
    least, most = bounds(stream.prompt_tokens)
    sessions = getattr(stream, "sessions", None)
    if sessions is not None:
        if sessions.first_prompt_tokens is not None:
            first = shortest(sessions.first_prompt_tokens)
            least = None if least is None or first is None else min(least, first)
        most = None if sessions.max_context_tokens is None \
            else sessions.max_context_tokens - prefix - 1
    return (None if least is None else least + prefix, None if most is None else most + prefix)


def least_request(stream) -> int | None:
    """The fewest tokens (prefix + prompt + output) one of ``stream``'s requests has; for
    conversations, their first turn's (its message is ``first_prompt_tokens`` when given,
    and no later turn is sent without it)."""
    if stream.prompt_tokens is None or stream.output_tokens is None:
        return None
    prompt, output = prompt_range(stream)[0], shortest(stream.output_tokens)
    sessions = getattr(stream, "sessions", None)
    if sessions is not None and sessions.first_prompt_tokens is not None:
        first = shortest(sessions.first_prompt_tokens)
        prefix = stream.prefix.tokens if stream.prefix is not None else 0
        prompt = None if first is None else first + prefix
    return None if prompt is None or output is None else prompt + output
