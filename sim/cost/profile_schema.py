"""The calibrated profile, declared: what ``calibrate/`` writes and ``sim/cost`` reads.

A profile (``profiles/calibrated/<device>/<model>.yaml``) is the one document that
crosses from the measuring tools to the simulator. :class:`CalibratedProfile` declares
it as the hardware and model profiles beside it are declared (``sim/config/specs.py``):
every writer serialises through it (``calibrate/fitting/profile_file.py``) and the
cost model reads it through it (``sim/cost/profile_file.py``); ``fleetsim schema
--profile`` prints its JSON Schema.

The fields the simulator reads are typed and checked (the model's shape, tp, dtypes,
the tables, the overhead, an engine's terms); the rest says where the numbers came
from and how well they fit (notes, provenance, fit errors, the points measured) and is
kept as written. Numbers keep the type they were written with (a table's x is an exact
integer, its seconds a float), and a profile dumps its fields in the order the writers
give them (``layout``), so a profile read and written again is the same bytes.
"""
from __future__ import annotations

import math
from typing import Annotated, Any, Union, get_args

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat,
                      StrictInt, ValidationError, WithJsonSchema)
from pydantic_core import PydanticCustomError

from sim.config.errors import dotted_path, short_repr
from sim.config.specs import DType
from sim.cost.tables import PerKeyTable, Table

PROFILE_VERSION = 1      # the layout of the profiles this fleetsim writes and reads
PROFILE_KIND = "fleetsim-calibrated-step-time"
TERMS = ("dense", "attn_prefill", "attn_decode", "lm_head", "tp_comm")
SHAPE_FIELDS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                "ffn_size", "vocab_size", "num_experts", "experts_per_token")
# seconds per step and per sequence an engine adds; and what one key read costs it, by
# the step's new tokens: [[new tokens, seconds per key], ...] at increasing token counts
ENGINE_SCALARS = ("constant_s", "per_seq_s", "per_prefill_step_s", "after_idle_s")
ENGINE_PER_KEY = "per_kv_token_s"
ENGINE_REPLACES_ATTENTION = "replaces_attention"   # the per-key cost is all the attention
# how much slower (> 1) or faster the machine ran the profile's own terms when the engine
# was measured than when the profile was: every measured table and the overhead scale by it
ENGINE_MODEL_SCALE = "model_scale"
# the type of this module's own errors, which read on from the field's name (" must be ...")
_ERROR = "calibrated_profile"

Number = Union[StrictInt, StrictFloat]


def _number(value: Any) -> str:
    return repr(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else f"a {type(value).__name__}"


def _whole(value: Any) -> Any:
    """A count: a whole number (a float of one too, kept as written), never true/false."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
        raise PydanticCustomError(_ERROR, " must be a whole number, got {got}",
                                  {"got": _number(value)})
    return value


def _seconds(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
            or not math.isfinite(value):
        raise PydanticCustomError(_ERROR, " must be a number >= 0, got {got}",
                                  {"got": _number(value)})
    return value


def _positive(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or not math.isfinite(value):
        raise PydanticCustomError(_ERROR, " must be a number > 0, got {got}",
                                  {"got": _number(value)})
    return value


def _version(value: Any) -> Any:
    if isinstance(value, bool) or value != PROFILE_VERSION:
        raise PydanticCustomError(
            _ERROR, " {got}: this fleetsim reads calibrated profiles of version {version} (a "
            "profile written by another fleetsim may mean other things by its tables): "
            "calibrate it anew with this one", {"got": repr(value), "version": PROFILE_VERSION})
    return value


def _table(value: Any) -> Any:
    """[x, seconds] rows a :class:`Table` reads: x positive and increasing, seconds
    non-decreasing."""
    try:
        Table(value, "it")
    except ValueError as exc:
        raise PydanticCustomError(_ERROR, "{why}", {"why": str(exc).removeprefix("it")}) from None
    return value


def _table_or_none(value: Any) -> Any:
    """A table that may be left empty (an all-reduce not measured)."""
    return value if value is None or value == [] else _table(value)


def _per_key(value: Any) -> Any:
    try:
        PerKeyTable(value, "it")
    except ValueError as exc:
        raise PydanticCustomError(_ERROR, "{why}", {"why": str(exc).removeprefix("it")}) from None
    return value


def _validated(check, schema: dict) -> Any:
    """A value ``check`` accepts as written (its type and digits kept), shown to editors
    as ``schema``."""
    return Annotated[Any, BeforeValidator(check), WithJsonSchema(schema)]


_NUMBER = {"type": "number"}
Version = _validated(_version, {"const": PROFILE_VERSION})
Whole = _validated(_whole, {"type": "integer"})
Seconds = _validated(_seconds, {**_NUMBER, "minimum": 0})
PositiveNumber = _validated(_positive, {**_NUMBER, "exclusiveMinimum": 0})
TableRows = _validated(_table, {
    "type": "array", "minItems": 1, "description": "[x, seconds] rows, x increasing",
    "items": {"type": "array", "prefixItems": [_NUMBER, _NUMBER], "minItems": 2,
              "maxItems": 2}})
OptionalTableRows = _validated(_table_or_none, {"anyOf": [
    {"type": "null"}, {"type": "array", "items": {"type": "array", "minItems": 2,
                                                   "maxItems": 2}}]})
PerKeyRows = _validated(_per_key, {
    "type": "array", "description": "[new tokens, seconds per key] rows, tokens increasing",
    "items": {"type": "array", "prefixItems": [_NUMBER, _NUMBER], "minItems": 2,
              "maxItems": 2}})
Text = Union[str, None]
Described = Union[dict[str, Any], None]     # provenance or fit errors, kept as written


class _Block(BaseModel):
    """A block of the profile: unknown keys are errors (a typo is not a silent default)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    def layout(self) -> dict:
        """The fields written, in the order declared (the order the writers give them)."""
        return self.model_dump(exclude_unset=True)


class ProfileShape(_Block):
    """The model's layer shapes the tables were measured at (the whole model; the
    tables are one tensor-parallel shard's)."""

    name: Text = Field(None, description="The model's name, e.g. llama-3.1-8b")
    num_layers: Whole
    hidden_size: Whole
    num_heads: Whole
    num_kv_heads: Whole
    head_dim: Whole | None = None
    ffn_size: Whole | None = None
    vocab_size: Whole | None = None
    num_experts: Whole | None = None
    experts_per_token: Whole | None = None


class ProfileTables(_Block):
    """Seconds per term for ONE layer on ONE shard (lm_head: the whole head), monotone
    [x, seconds] rows read in log-log space; tp_comm empty or absent when not measured."""

    dense: TableRows = Field(description="x = new tokens in the step")
    attn_prefill: TableRows = Field(description="x = Σ chunk·(context + chunk/2)")
    attn_decode: TableRows = Field(description="x = Σ keys read by decoding sequences")
    lm_head: TableRows = Field(description="x = sequences in the step")
    tp_comm: OptionalTableRows = Field(
        None, description="x = new tokens (two all-reduces a layer); [] when not measured")


class ProfileOverhead(_Block):
    """Seconds a step spends besides the layer terms: a constant and a cost a sequence."""

    constant_s: Seconds = 0.0
    per_seq_s: Seconds = 0.0
    attn_decode_per_seq_per_layer_s: Seconds = Field(
        0.0, description="decode attention's cost a sequence and layer, moved into per_seq_s")
    fitted_per_seq_s: Seconds | None = None
    host_per_seq_s: Seconds | None = Field(
        None, description="the host's part of per_seq_s (a profile of GPU kernels), which "
                          "an engine preset's host time replaces")


class EngineTerms(_Block):
    """What a real serving engine adds to the model's step, fitted on its own steps
    (``fleetsim validate``)."""

    name: Text = None
    transformers_version: Text = None
    vllm_version: Text = None
    constant_s: Seconds = 0.0
    per_seq_s: Seconds = 0.0
    per_prefill_step_s: Seconds = 0.0
    after_idle_s: Seconds = Field(0.0, description="a step after the engine sat idle")
    per_kv_token_s: PerKeyRows = Field(
        None, description="seconds per key read, by the step's new tokens")
    replaces_attention: StrictBool = Field(
        False, description="the per-key cost is all of the step's attention")
    model_scale: PositiveNumber = Field(
        1.0, description="multiplies the profile's measured terms and overhead")
    limits: Described = None
    fit_steps: Whole | None = None
    held_back_step_error: Described = None
    step_error: Described = None
    step_error_without_engine_terms: Described = None
    note: Text = None


class CalibratedProfile(_Block):
    """A calibrated step-time profile: one model's layer terms measured on one device at
    one tensor-parallel degree (``fleetsim calibrate``, ``python -m calibrate
    gpu-profiles``), with a serving engine's terms when ``fleetsim validate`` fitted them."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False,
                              title="Calibrated step-time profile")

    kind: Text = Field(None, description=f"'{PROFILE_KIND}'")
    version: Version = PROFILE_VERSION
    model: ProfileShape
    device: Text = None
    device_name: Text = Field(None, description="the device measured (a GPU's hardware name)")
    torch_version: Text = None
    dtype: DType | None = Field(None, description="the weights' dtype")
    kv_dtype: DType | None = Field(None, description="the KV cache's dtype")
    tp: Whole = 1
    engine_name: Text = None
    threads: Whole | None = None
    clock: Text = None
    timing: Text = None
    source: Described = Field(None, description="where measured kernels came from")
    date: Text = None
    quick: StrictBool | None = None
    note: Text = None
    tables: ProfileTables
    tp_comm_measured: StrictBool = False
    overhead: ProfileOverhead | None = None
    points: Described = None
    fit_error: Described = None
    held_back_error: Described = None
    held_back_note: Text = None
    forward_layers: Whole | None = None
    forwards: Union[list[Any], None] = None
    measured: Described = None
    held_back_points: Described = None
    settings: Described = None
    engine: EngineTerms | None = None


def parse_profile(data: Any, where: str) -> CalibratedProfile:
    """``data`` (a profile file's document) as a :class:`CalibratedProfile`; ValueError
    naming ``where`` and each field that is wrong."""
    try:
        return CalibratedProfile.model_validate(data)
    except ValidationError as exc:
        raise ValueError("; ".join(_problem(err, where) for err in
                                   exc.errors(include_url=False)[:5])) from None


def _problem(err: dict, where: str) -> str:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and (
        p.startswith("function-") or p in ("str", "none", "int", "float", "bool"))))
    field = dotted_path(loc) or "the profile"
    if err["type"] == _ERROR:                    # reads on from the field's name
        return f"{where}: {field}{err['msg']}"
    if err["type"] == "missing":
        return f"{where}: {field} is missing"
    if err["type"] == "model_type":
        return f"{where}: {field} must be a mapping, got {short_repr(err.get('input'))}"
    if err["type"] == "extra_forbidden":
        known = _known_keys(loc[:-1])
        return (f"{where}: {field} is not a field of a calibrated profile"
                + (f" (known here: {', '.join(known)})" if known else ""))
    got = short_repr(err.get("input"))
    return f"{where}: {field}: {err['msg']}, got {got}"


def _known_keys(loc: tuple) -> list[str]:
    model: type[BaseModel] = CalibratedProfile
    for part in loc:
        info = model.model_fields.get(part) if isinstance(part, str) else None
        inner = [t for t in get_args(info.annotation) or (info.annotation,)
                 if isinstance(t, type) and issubclass(t, BaseModel)] if info else []
        if not inner:
            return []
        model = inner[0]
    return list(model.model_fields)

