"""pydantic's validation errors as located Problems.

:func:`from_validation_error` turns a pydantic ``ValidationError`` into one
Problem per pydantic error: internal loc parts (union tags,
``function-after[...]``) are dropped, unknown keys list the valid keys with a
did-you-mean, and the line comes from the :class:`sim.config.yamlio.LineMap`.
A discriminated union's tag is recognised by walking ``root_model``'s types
alongside the loc, so a tag that is also a key (``type: target`` next to a
``target:`` field) is still dropped as a tag.
"""
from __future__ import annotations

import collections.abc
import difflib
import re
import types
import typing
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, Field, ValidationError

from sim.config.errors import Problem, ScenarioError, dotted_path, short_repr

if TYPE_CHECKING:
    from sim.config.yamlio import LineMap


def from_validation_error(exc: ValidationError, *, file: str | None, line_map: LineMap,
                          root_model: type[BaseModel] | None = None,
                          data: Any = None) -> ScenarioError:
    """Convert a pydantic ``ValidationError`` into a located ScenarioError.

    ``data`` is the input that was validated (used to drop pydantic-internal
    loc parts and to pick union members); without it the line map's keys
    are used instead. ``root_model`` lets unknown-key errors list the keys
    that are valid at that place.
    """
    problems: list[Problem] = []
    seen: set[tuple[Any, ...]] = set()
    for err in exc.errors(include_url=False):
        kind = err["type"]
        path = _real_path(tuple(err["loc"]), data, line_map, keep_last=kind == "missing",
                          root_model=root_model)
        message, path = _message(err, path, data, root_model)
        key = err.get("input")
        line = line_map.line_for(path)
        if (err["msg"] == "Keys should be strings" or "[key]" in err["loc"]) \
                and not isinstance(key, str):
            # a YAML key that reads as a number, a boolean or null: name the key, not an index
            path = path[:-1] if path and path[-1] == key else path
            what = {bool: "true or false", type(None): "null"}.get(type(key), "a number")
            message = (f"the key {short_repr(key)} reads as {what}, not a name: quote it "
                       f"(\"{key}\")" if key is not None else
                       "a key that reads as null (~ or nothing), not a name: write the name")
        problem = Problem(message, file=file, line=line, field=dotted_path(path) or None)
        key = (problem.line, problem.field, problem.message)
        if key not in seen:
            seen.add(key)
            problems.append(problem)
    problems.sort(key=lambda p: (p.line is None, p.line or 0))
    return ScenarioError.many(problems or [Problem(str(exc), file=file)])


# --- loc cleanup -----------------------------------------------------------------------

_NO_VALUE = object()


def _child(value: Any, part: Any) -> Any:
    """``value[part]`` for real data keys / list indices, else _NO_VALUE."""
    if isinstance(value, dict):
        try:
            return value[part] if part in value else _NO_VALUE
        except TypeError:
            return _NO_VALUE
    if isinstance(value, (list, tuple)) and isinstance(part, int) and not isinstance(part, bool):
        return value[part] if 0 <= part < len(value) else _NO_VALUE
    return _NO_VALUE


def _value_at(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        data = _child(data, part)
        if data is _NO_VALUE:
            break
    return data


def _real_path(loc: tuple[Any, ...], data: Any, line_map: LineMap, *, keep_last: bool,
               root_model: type[BaseModel] | None = None) -> tuple[Any, ...]:
    """Keep only loc parts that are keys in the input (plus a missing key at the end).

    A discriminated union puts the tag of the member it chose into the loc
    (``autoscaler.target.metric`` for ``autoscaler: {type: target, ...}``).
    Such a tag can also be a key of the member (TargetConfig has a ``target``
    field), so with ``root_model`` the loc is walked with the model's types and
    a part at a union's position that names the member the input chose is
    dropped as a tag before the input's keys are consulted. Without
    ``root_model`` every part that is a key in the input is kept.
    """
    out: tuple[Any, ...] = ()
    value = data
    tp: Any = root_model
    for i, part in enumerate(loc):
        member = _tag_member(tp, part, value if data is not None else _NO_VALUE)
        if member is not None:
            tp = member
            continue
        if data is not None:
            child = _child(value, part)
            known = child is not _NO_VALUE
        else:
            child, known = None, (out + (part,)) in line_map
        if known:
            tp = _child_type(tp, part, value) if tp is not None else None
            out, value = out + (part,), child
        elif keep_last and i == len(loc) - 1:
            out += (part,)
    return out


# --- messages --------------------------------------------------------------------------

def _did_you_mean(word: Any, choices: list[str]) -> str:
    if not isinstance(word, str):
        return ""
    match = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _quoted(text: str) -> list[str]:
    return re.findall(r"'([^']*)'", text or "")


def _message(err: dict[str, Any], path: tuple[Any, ...], data: Any,
             root_model: type[BaseModel] | None) -> tuple[str, tuple[Any, ...]]:
    """Readable message for one pydantic error; may extend ``path`` (discriminator key)."""
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "missing":
        return f"missing required key {path[-1]!r}" if path else "missing required value", path
    if kind == "extra_forbidden":
        key = path[-1] if path else err["loc"][-1]
        valid = _valid_keys(root_model, path[:-1], data)
        text = f"unknown key {short_repr(key)}"
        if valid:
            text += f"; valid keys: {', '.join(valid)}" + _did_you_mean(key, valid)
        return text, path
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        disc = (_quoted(str(ctx.get("discriminator", ""))) or [None])[0]
        tags = _quoted(str(ctx.get("expected_tags", ""))) or \
            _union_tags(root_model, path, data, disc)
        choices = ", ".join(repr(t) for t in tags)
        if disc:
            path = path + (disc,)
        if kind == "union_tag_not_found":
            text = f"missing required key {disc!r}" if disc else err["msg"]
            return text + (f"; expected one of {choices}" if tags else ""), path
        tag = ctx.get("tag")
        text = f"Input tag {tag!r} found using {disc!r} does not match; expected one of {choices}"
        return text + _did_you_mean(tag, tags), path
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if kind == "bool_type":     # strict: YAML 1.2 reads yes/no/on/off/1 as text or numbers
        return f"expected true or false (got {short_repr(value)})", path
    if kind in ("literal_error", "enum"):
        return msg + f" (got {short_repr(value)})" + \
            _did_you_mean(value, _quoted(str(ctx.get("expected", "")))), path
    if kind == "not_a_flag":     # it says what it got
        return msg, path
    if not (isinstance(value, str) and repr(value) in msg):  # units errors quote it already
        msg += f" (got {short_repr(value)})"
    return msg, path


# --- walking the model's types ---------------------------------------------------------

def _unwrap(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _members(tp: Any) -> list[Any]:
    """Flatten Annotated / Optional / Union into their member types."""
    tp = _unwrap(tp)
    if get_origin(tp) in (Union, types.UnionType):
        return [m for arg in get_args(tp) for m in _members(arg)]
    return [tp]


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _field_key(name: str, info: Any) -> str:
    alias = info.validation_alias if isinstance(info.validation_alias, str) else info.alias
    return alias or name


def _literal_score(model: type[BaseModel], value: dict) -> int:
    """Number of Literal fields matching ``value``; -1 if any contradicts it."""
    score = 0
    for name, info in model.model_fields.items():
        ann = _unwrap(info.annotation)
        key = _field_key(name, info)
        if get_origin(ann) is Literal and key in value:
            if value[key] not in get_args(ann):
                return -1
            score += 1
    return score


def _pick_model(tp: Any, value: Any) -> type[BaseModel] | None:
    """The model among ``tp``'s members that ``value`` is meant for, if clear."""
    models = [m for m in _members(tp) if _is_model(m)]
    if len(models) <= 1:
        return models[0] if models else None
    if not isinstance(value, dict):
        return None
    scored = [(s, m) for m in models if (s := _literal_score(m, value)) > 0]
    best = [m for s, m in scored if s == max((s for s, _ in scored), default=0)]
    return best[0] if len(best) == 1 else None


def _field_type(info: Any) -> Any:
    """A field's annotation, keeping a field-level ``discriminator=`` as Annotated metadata."""
    if info.discriminator is not None:
        return Annotated[info.annotation, Field(discriminator=info.discriminator)]
    return info.annotation


def _discriminated(tp: Any) -> tuple[str, dict[str, type[BaseModel]]] | None:
    """``(discriminator key, {tag: member})`` if ``tp`` is a discriminated union.

    Looks through Annotated and Optional; a callable discriminator is not
    followed (its tags are not known from the types).
    """
    disc = None
    while get_origin(tp) is Annotated:
        args = get_args(tp)
        for meta in args[1:]:
            found = getattr(meta, "discriminator", None)
            found = getattr(found, "discriminator", found)  # a pydantic.Discriminator
            if isinstance(found, str):
                disc = found
        tp = args[0]
    if get_origin(tp) not in (Union, types.UnionType):
        return None
    if disc is None:
        others = [a for a in get_args(tp) if a is not type(None)]
        return _discriminated(others[0]) if len(others) == 1 else None
    key, members = disc, {}
    for member in _members(tp):
        if _is_model(member):
            for name, info in member.model_fields.items():
                ann = _unwrap(info.annotation)
                if disc in (name, _field_key(name, info)) and get_origin(ann) is Literal:
                    key = _field_key(name, info)  # the input's key: the alias, if any
                    members.update((str(tag), member) for tag in get_args(ann))
    return key, members


def _tag_member(tp: Any, part: Any, value: Any) -> type[BaseModel] | None:
    """The member whose tag ``part`` is, if ``part`` is pydantic's tag at a union of type ``tp``.

    ``part`` must be one of the union's tags and, where the input is known
    (``value`` is not _NO_VALUE) and is a mapping holding the discriminator,
    the tag the input gives: then it cannot be a key that only looks like one.
    """
    found = _discriminated(tp) if tp is not None else None
    if found is None or not isinstance(part, str):
        return None
    disc, members = found
    if part not in members:
        return None
    if isinstance(value, dict) and disc in value and str(value[disc]) != part:
        return None
    return members[part]


def _child_type(tp: Any, part: Any, value: Any) -> Any:
    """Annotation of ``part`` inside a value of type ``tp`` (None if unknown)."""
    model = _pick_model(tp, value) if not isinstance(value, list) else None
    if model is not None:
        for name, info in model.model_fields.items():
            if part in (name, _field_key(name, info)):
                return _field_type(info)
        return None
    for member in _members(tp):
        origin, args = get_origin(member), get_args(member)
        if isinstance(part, str) and origin in (dict, collections.abc.Mapping,
                                                collections.abc.MutableMapping, typing.Mapping):
            return args[1] if len(args) == 2 else Any
        if isinstance(part, int) and origin in (list, tuple, set, frozenset,
                                                collections.abc.Sequence):
            if origin is tuple and args and args[-1] is not Ellipsis:
                return args[part] if part < len(args) else None
            return args[0] if args else Any
    return None


def _type_at(root: Any, path: tuple[Any, ...], data: Any) -> Any:
    tp, value = root, data
    for part in path:
        tp = _child_type(tp, part, value)
        if tp is None:
            return None
        child = _child(value, part)
        value = None if child is _NO_VALUE else child
    return tp


def _valid_keys(root: type[BaseModel] | None, path: tuple[Any, ...], data: Any) -> list[str]:
    """Keys the model at ``path`` accepts, in declaration order ([] if unknown)."""
    if root is None:
        return []
    tp = _type_at(root, path, data)
    model = _pick_model(tp, _value_at(data, path)) if tp is not None else None
    if model is None:
        return []
    return [_field_key(name, info) for name, info in model.model_fields.items()]


def _union_tags(root: type[BaseModel] | None, path: tuple[Any, ...], data: Any,
                disc: str | None) -> list[str]:
    """Literal values of the discriminator field across the union at ``path``."""
    if root is None or disc is None:
        return []
    tags: list[str] = []
    for member in _members(_type_at(root, path, data)):
        if _is_model(member):
            for name, info in member.model_fields.items():
                ann = _unwrap(info.annotation)
                if _field_key(name, info) == disc and get_origin(ann) is Literal:
                    tags += [str(a) for a in get_args(ann)]
    return tags
