"""Shared pieces of the typed scenario configuration.

Every config model forbids unknown keys, so a typo is an error rather than
a silently ignored field. Quantities with units are parsed by the
``Annotated`` aliases below (a bare number is the SI base unit).
"""
from __future__ import annotations

import types
import unicodedata
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field,
                      PlainSerializer, PlainValidator, Strict, StringConstraints,
                      ValidationError, WrapValidator, model_validator)
from pydantic_core import InitErrorDetails, PydanticCustomError

from sim.config import units


class StrictModel(BaseModel):
    """Base for every config block: unknown keys are errors, values are frozen, and true
    or false is a number nowhere (pydantic's lax mode reads true as 1: `seed: true`,
    `gpu_memory_utilization: true`)."""

    # no number is infinite or NaN: each one drives work, memory or a figure
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True,
                              allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _true_or_false_only_where_a_flag_is(cls, data):
        if not isinstance(data, dict):
            return data
        errors = []
        for key, value in data.items():
            if not isinstance(value, (bool, dict, list, str)):
                continue
            field = cls.model_fields.get(key) if isinstance(key, str) else None
            if field is None:
                field = next((f for f in cls.model_fields.values() if f.alias == key), None)
            if field is None:
                continue
            if isinstance(value, str):
                # pydantic's lax mode reads "1_000" and "32" as numbers: a count or a
                # number without units is written as a number
                if _reads_as_number(value) and _plain_number(field.annotation, field.metadata):
                    errors.append(_text_for_number((key,), value))
                continue
            if isinstance(value, (dict, list)):
                inner = _items_type(field.annotation)
                if inner is not None and _plain_number(inner):
                    items = value.items() if isinstance(value, dict) else enumerate(value)
                    errors += [_text_for_number((key, k), v) for k, v in items
                               if isinstance(v, str) and _reads_as_number(v)]
            if _takes_bool(field.annotation):
                continue
            if isinstance(value, bool):
                errors.append(_not_a_flag((key,), value))
                continue
            inner = _items_type(field.annotation)
            if inner is None or _takes_bool(inner):
                continue
            items = value.items() if isinstance(value, dict) else enumerate(value)
            errors += [_not_a_flag((key, k), v) for k, v in items if isinstance(v, bool)]
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return data


def _not_a_flag(loc: tuple, value: bool) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError(
        "not_a_flag", "expected a number or a setting, got {value}: true and false are for "
        "yes/no fields only", {"value": str(value).lower()}), loc=loc, input=value)


def _text_for_number(loc: tuple, value: str) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError(
        "text_for_number", "expected a number, got the text {value}: write it without "
        "quotes (and without _ or ,)", {"value": repr(value[:40])}), loc=loc, input=value)


def _reads_as_number(text: str) -> bool:
    """Text pydantic's lax mode would take for a number ("32", "1_000", " 4.5 "); other
    text gets pydantic's own error beside the rest of the block's."""
    try:
        float(text)
    except ValueError:
        return False
    return True


_PARSERS = (BeforeValidator, PlainValidator, WrapValidator)


def _parses_text(metadata) -> bool:
    """Whether validators in ``metadata`` read text (a unit parser such as "30s"), other
    than the check that refuses true and false."""
    return any(isinstance(m, _PARSERS) and getattr(m, "func", None) is not _not_bool
               for m in metadata)


def _plain_number(annotation, metadata=()) -> bool:
    """True if a field of this type holds a number and reads no text: an int or a float
    (or an optional one) with no parser of units."""
    if _parses_text(metadata):
        return False
    while get_origin(annotation) is Annotated:
        args = get_args(annotation)
        if _parses_text(args[1:]):
            return False
        annotation = args[0]
    if annotation is int or annotation is float:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return bool(args) and all(_plain_number(a) for a in args)
    return False


def _strip(annotation):
    """``annotation`` without Annotated's metadata."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _takes_bool(annotation) -> bool:
    """True if a field of this type may hold true or false."""
    annotation = _strip(annotation)
    if annotation is bool or annotation is Any or annotation is object:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_takes_bool(a) for a in get_args(annotation))
    if get_origin(annotation) is Literal:
        return any(isinstance(a, bool) for a in get_args(annotation))
    return False


def _items_type(annotation):
    """The type of a dict's values or a list's items; None for anything else."""
    annotation = _strip(annotation)
    if get_origin(annotation) in (Union, types.UnionType):
        found = [t for t in map(_items_type, get_args(annotation)) if t is not None]
        return found[0] if len(found) == 1 else None
    args = get_args(annotation)
    if get_origin(annotation) is dict and len(args) == 2:
        return args[1]
    if get_origin(annotation) in (list, tuple) and args:
        return args[0]
    return None


def _positive(x: float) -> float:
    if not x > 0:
        raise ValueError(f"must be greater than 0, got {x}")
    return x


def _non_negative(x: float) -> float:
    if x < 0:
        raise ValueError(f"must be at least 0, got {x}")
    return x


# what a quantity with units accepts, as the schema tells an editor: 2, 2.5, "200ms"
_NumberOrUnits = Union[float, str]
Seconds = Annotated[float, BeforeValidator(units.seconds, json_schema_input_type=_NumberOrUnits), AfterValidator(_non_negative)]
PositiveSeconds = Annotated[float, BeforeValidator(units.seconds, json_schema_input_type=_NumberOrUnits), AfterValidator(_positive)]
# a latency target: its unit written out ("50ms", "2s"), never a bare number (see
# units.seconds_with_unit); written back as seconds with the unit, so a scenario fleetsim
# dumps (results, sweeps' workers, overrides) reads back the same
LatencyTarget = Annotated[float, BeforeValidator(units.seconds_with_unit, json_schema_input_type=str), AfterValidator(_positive), PlainSerializer(lambda s: f"{s!r}s", return_type=str)]
Bytes = Annotated[float, BeforeValidator(units.bytes_, json_schema_input_type=_NumberOrUnits), AfterValidator(_non_negative)]
PositiveBytes = Annotated[float, BeforeValidator(units.bytes_, json_schema_input_type=_NumberOrUnits), AfterValidator(_positive)]
BytesPerS = Annotated[float, BeforeValidator(units.bandwidth, json_schema_input_type=_NumberOrUnits), AfterValidator(_positive)]
FlopsPerS = Annotated[float, BeforeValidator(units.flops, json_schema_input_type=_NumberOrUnits), AfterValidator(_positive)]
RatePerS = Annotated[float, BeforeValidator(units.rate_per_s, json_schema_input_type=_NumberOrUnits), AfterValidator(_non_negative)]
PositiveRatePerS = Annotated[float, BeforeValidator(units.rate_per_s, json_schema_input_type=_NumberOrUnits), AfterValidator(_positive)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
# a share that divides: an efficiency of 0 would make every step take forever
PositiveFraction = Annotated[float, Field(gt=0.0, le=1.0)]
# A price: well above any GPU's hourly rate, so a typo in units (cents, a yearly figure)
# or a 1e300 is refused rather than printed as a cost
MAX_USD_PER_GPU_HOUR = 10_000.0
UsdPerGpuHour = Annotated[float, Field(ge=0, le=MAX_USD_PER_GPU_HOUR)]


# A yes/no setting: only true or false. Pydantic alone would also take the strings
# "yes", "on", "1" (and the numbers 0 and 1), which YAML 1.2 reads as text.
Flag = Annotated[bool, Strict()]


def _not_bool(value):
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got a boolean ({value})")
    return value


# Counts fit 32 bits: no count a scenario gives (tokens, sequences, blocks, requests)
# comes near, and none may overflow the int64 arrays they end up in.
MAX_COUNT = 2 ** 31 - 1
PositiveInt = Annotated[int, BeforeValidator(_not_bool), Field(gt=0, le=MAX_COUNT)]
NonNegativeInt = Annotated[int, BeforeValidator(_not_bool), Field(ge=0, le=MAX_COUNT)]
# Replicas of one pool: each is simulated as its own engine.
MAX_REPLICAS = 100_000
ReplicaCount = Annotated[PositiveInt, Field(le=MAX_REPLICAS)]
ReplicaFloor = Annotated[NonNegativeInt, Field(le=MAX_REPLICAS)]


MAX_NAME_CHARS = 128
MAX_PATH_CHARS = 4096


def _path_text(path: str) -> str:
    if "\x00" in path:
        raise ValueError("a path cannot hold a NUL character")
    return path


# A file a scenario names (a trace, a column of lengths, a calibrated profile)
FilePath = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PATH_CHARS),
                     AfterValidator(_path_text)]


# scripts with letters that look alike (Latin a, Cyrillic а, Greek α): one name uses one
_LOOK_ALIKE_SCRIPTS = {"LATIN", "CYRILLIC", "GREEK"}


def _script(ch: str) -> str | None:
    """The script of a letter (LATIN, CYRILLIC, GREEK, ...), None for anything else."""
    if not ch.isalpha():
        return None
    return unicodedata.name(ch, "").split(" ", 1)[0] or None


def _printable(name: str) -> str:
    if name != name.strip():
        raise ValueError("a name may not start or end with spaces (\"search \" would be "
                         "another team than \"search\")")
    if not name.isprintable():
        raise ValueError("a name must be printable: no control characters, NUL, line breaks "
                         "or invisible formatting characters")
    scripts = sorted({s for s in map(_script, name) if s in _LOOK_ALIKE_SCRIPTS})
    if len(scripts) > 1:
        raise ValueError(f"a name may not mix {' and '.join(s.title() for s in scripts)} "
                         "letters (a look-alike letter would make two names that read the "
                         "same)")
    return name


# A name the scenario gives or refers to (a team, stream, pool, model, key): it reaches
# terminals, CSV files and reports, so it is printable, not empty and at most 128 characters.
Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS),
                 AfterValidator(_printable)]
