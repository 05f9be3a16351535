"""Safe YAML loading that remembers where every key came from.

``load_yaml`` parses a scenario file with a subclass of ``yaml.SafeLoader``
(no tags that build Python objects, nothing evaluated as code) and returns
plain data plus a :class:`LineMap`, so validation errors can name the line
of the offending key. It is stricter than plain PyYAML in three ways:

* a key repeated in one mapping is an error (PyYAML keeps the last one);
* the top level must be a mapping, and an empty file is an error;
* the file must be a regular file of at most 8 MiB holding at most 100,000 values.

Its errors never quote the file: they give a line, a column and, for a file
that is not the kind expected (``expected_keys``), no key of it at all.

Plain scalars follow YAML 1.2, not PyYAML's YAML 1.1: ``on``/``off``/``yes``/``no``
stay strings (a key ``on:`` is the key "on", not True), ``1:30`` is not 90, ``010`` is
ten, dates stay strings, and ``1e6`` and ``2.5e9`` read as floats.

Every problem is raised as :class:`sim.config.errors.ScenarioError`.
"""
from __future__ import annotations

import pathlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pydantic
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from sim.config.errors import Problem, ScenarioError, dotted_path, short_repr
from sim.config.validation_errors import from_validation_error
from sim.config.inputs import InputFileError, read_bytes, shown

Loc = tuple[Any, ...]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_MAX_NODES = 1_000_000  # guards the line walk against alias bombs
# Values written in the file (mappings, lists and scalars alike). The largest shipped
# scenario holds a few hundred; a long series (a rate per minute for a month) belongs in
# a trace or a CSV the scenario names. Counted while parsing, so a huge list is refused
# in about a second rather than after a minute of parsing.
MAX_WRITTEN_VALUES = 100_000
# A YAML document's size: parsing is pure Python (about 1 s per 4 MiB of text).
MAX_YAML_BYTES = 8 * 2**20


# libyaml where the install has it: the same safe loading and writing, about ten times
# faster
_DATA_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DATA_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump_data(data: Any) -> str:
    """``yaml.safe_dump(data, sort_keys=False, allow_unicode=True)``: the same text."""
    return yaml.dump(data, Dumper=_DATA_DUMPER, sort_keys=False, allow_unicode=True)


def load_data(text: str) -> Any:
    """A data file's YAML (a hardware or model profile, a calibrated profile): YAML 1.1
    safe loading as ``yaml.safe_load`` does it. libyaml refuses nesting deeper than
    1,000 levels; that is raised as the ``RecursionError`` the pure-Python parser meets."""
    try:
        return yaml.load(text, Loader=_DATA_LOADER)
    except yaml.MarkedYAMLError as exc:
        if "nesting depth" in str(exc.problem):
            raise RecursionError(str(exc.problem)) from None
        raise


class SafeLineLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with YAML 1.2's plain scalars instead of YAML 1.1's."""

    _composed = 0

    def compose_node(self, parent, index):  # noqa: D102 (PyYAML's hook)
        self._composed += 1
        if self._composed > MAX_WRITTEN_VALUES:
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(
                None, None, f"the document holds more than {MAX_WRITTEN_VALUES:,} values; "
                "a scenario needs far fewer (put a long series in a trace file)", mark)
        return super().compose_node(parent, index)


_BOOL, _INT, _FLOAT = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int",
                       "tag:yaml.org,2002:float")
_YAML11_ONLY = {_BOOL, _INT, _FLOAT, "tag:yaml.org,2002:timestamp"}

# YAML 1.1 reads `on`, `off`, `yes`, `no` as booleans (a key `on:` becomes True), `1:30`
# as 90, `010` as 8 and `2024-01-01` as a date; YAML 1.2 (and every scenario author)
# reads them as written. Only true/false are booleans, integers are decimal (or 0x, 0o),
# floats also take an exponent without a dot (`1e6`); `_` may group digits.
SafeLineLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _YAML11_ONLY]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
SafeLineLoader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
SafeLineLoader.add_implicit_resolver(
    _INT, re.compile(r"^(?:[-+]?[0-9][0-9_]*|[-+]?0x[0-9a-fA-F][0-9a-fA-F_]*|[-+]?0o[0-7][0-7_]*)$"),
    list("-+0123456789"))
SafeLineLoader.add_implicit_resolver(
    _FLOAT, re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?
                        |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
                        |[-+]?\.(?:inf|Inf|INF)
                        |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+.0123456789"))


MAX_INT_DIGITS = 4000    # below Python's own limit on reading integers (4,300 digits)


def _construct_int(loader: yaml.SafeLoader, node: ScalarNode) -> int:
    text = loader.construct_scalar(node).replace("_", "")
    digits = text.lstrip("+-").lower()
    if len(digits) > MAX_INT_DIGITS:
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of {len(digits):,} digits is too long (at most "
                        f"{MAX_INT_DIGITS})", node.start_mark)
    return int(text, 0) if digits.startswith(("0x", "0o")) else int(text, 10)


SafeLineLoader.add_constructor(_INT, _construct_int)


@dataclass
class LineMap:
    """1-based source line of every location in a loaded document.

    Keys are location tuples such as ``("pools", "main", "replicas")`` (list
    indices are ints). A mapping entry maps to the line of its key, a list
    item to the line where the item starts, and ``()`` to the document start.
    """

    lines: dict[Loc, int] = field(default_factory=dict)

    def get(self, loc: Loc) -> int | None:
        """Line of exactly ``loc``, or None."""
        return self.lines.get(tuple(loc))

    def line_for(self, loc: Loc) -> int | None:
        """Line of the deepest known prefix of ``loc``.

        Elements that are not keys at that place (pydantic's union tags,
        ``function-after[...]`` and the like, or a key that is missing from
        the data) are skipped, and the walk continues with the next element.
        """
        known: Loc = ()
        line = self.lines.get(known)
        for part in loc:
            candidate = known + (part,)
            try:
                found = self.lines.get(candidate)
            except TypeError:  # unhashable part
                continue
            if found is not None:
                known, line = candidate, found
        return line

    def __contains__(self, loc: object) -> bool:
        return isinstance(loc, tuple) and loc in self.lines

    def __len__(self) -> int:
        return len(self.lines)


# a scenario's deepest block is a few levels (pools.<name>.scheduler.<field>, a mixture
# of lengths); a document nested far deeper is refused before anything recurses over it
MAX_DEPTH = 32


def depth_of(data: Any) -> int:
    """How deeply ``data``'s mappings and lists nest (iteratively: no recursion limit)."""
    deepest, stack = 0, [(data, 1)]
    seen: set[int] = set()
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            if id(node) in seen:        # an alias shares a node: count it once
                continue
            seen.add(id(node))
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            stack.extend((v, level + 1) for v in (node.values() if isinstance(node, dict)
                                                  else node))
    return deepest


def load_yaml(path: pathlib.Path, *, expected_keys: Iterable[str] | None = None,
              kind: str = "scenario") -> tuple[Any, LineMap]:
    """Parse ``path`` safely; return ``(data, line_map)``.

    ``data`` is a dict of plain Python values. Raises ScenarioError for an
    unreadable file, a YAML syntax error, an unsafe or unknown tag, a
    duplicate key, an empty file, or a top level that is not a mapping. With
    ``expected_keys``, a top-level mapping holding none of them is refused
    without naming any of its keys (it is some other file).
    """
    file = shown(path)
    text = _read_text(pathlib.Path(path), file)
    loader = None
    try:
        loader = SafeLineLoader(text)  # the reader rejects control characters here
        node = loader.get_single_node()
        if node is None:
            raise ScenarioError("file is empty; expected a mapping of keys to values",
                                file=file, line=1)
        if expected_keys is not None:
            _check_kind(loader, node, list(expected_keys), file, kind)
        _check_duplicate_keys(loader, node, file)
        data = loader.construct_document(node)  # also flattens merge keys in the node graph
        lines: dict[Loc, int] = {(): node.start_mark.line + 1}
        _record_lines(loader, node, (), lines, set(), [0], file)
    except yaml.MarkedYAMLError as exc:
        raise _from_marked_error(exc, file) from None
    except yaml.reader.ReaderError as exc:
        char = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        raise ScenarioError(f"invalid YAML: {exc.reason} (character {char})", file=file,
                            line=text[: exc.position].count("\n") + 1) from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"invalid YAML: {exc}", file=file) from None
    except RecursionError:
        raise ScenarioError("invalid YAML: nesting too deep", file=file) from None
    finally:
        if loader is not None:
            loader.dispose()
    if data is None:
        raise ScenarioError("file is empty; expected a mapping of keys to values",
                            file=file, line=1)
    depth = depth_of(data)
    if depth > MAX_DEPTH:
        raise ScenarioError(f"nested more than {MAX_DEPTH} levels deep; a scenario needs "
                            "far fewer (a mixture of mixtures, flattened, is one mixture)",
                            file=file)
    if not isinstance(data, dict):
        raise ScenarioError("the top level must be a mapping of keys to values, "
                            f"got a {type(data).__name__}",
                            file=file, line=node.start_mark.line + 1)
    return data, LineMap(lines)


def load_model(path: pathlib.Path, model: type[pydantic.BaseModel], *,
               kind: str = "profile") -> Any:
    """Load ``path`` and validate it as pydantic ``model``; errors are ScenarioError.

    A file none of whose top-level keys is a field of ``model`` is some other file: it
    is refused without naming any of its keys."""
    data, line_map = load_yaml(path, expected_keys=model.model_fields, kind=kind)
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise from_validation_error(exc, file=str(path), data=data, line_map=line_map,
                                    root_model=model) from None


def load_model_fast(path: pathlib.Path, model: type[pydantic.BaseModel], *,
                    kind: str = "profile") -> Any:
    """``load_model`` for a file that is read on every run and is almost always valid
    (a shipped preset table): parsed with libyaml and validated at once; only a file
    that fails is read again with line tracking, for the located error."""
    try:
        data = yaml.load(_read_text(path, str(path)), Loader=_DATA_LOADER)
        if isinstance(data, dict):
            return model.model_validate(data)
    except (yaml.YAMLError, pydantic.ValidationError):
        pass
    return load_model(path, model, kind=kind)


def _check_kind(loader: yaml.SafeLoader, node: Node, expected: list[str], file: str,
                kind: str) -> None:
    """Refuse a top-level mapping none of whose keys is expected, naming none of them."""
    if not isinstance(node, MappingNode):
        return
    keys = {_key_of(loader, k) for k, _ in node.value if isinstance(k, ScalarNode)
            and k.tag != _MERGE_TAG}
    if not any(isinstance(k, str) and k in expected for k in keys):
        raise ScenarioError(f"not a {kind}: none of the top-level keys is one of "
                            + ", ".join(expected), file=file, line=node.start_mark.line + 1)


def _read_text(path: pathlib.Path, file: str) -> str:
    try:
        raw = read_bytes(path, max_bytes=MAX_YAML_BYTES)
    except InputFileError as exc:
        raise ScenarioError(f"cannot read file: {exc.message}", file=file) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"file is not valid UTF-8 text ({exc.reason} at byte {exc.start})",
                            file=file, line=raw[: exc.start].count(b"\n") + 1) from None
    # PyYAML breaks lines at these too (YAML 1.1), so every later line number would be
    # off from what an editor shows; no scenario needs them
    odd = _ODD_BREAKS.search(text)
    if odd is not None:
        raise ScenarioError(f"invalid YAML: a line or paragraph separator (character "
                            f"#x{ord(odd.group()):04x}); write a plain line break",
                            file=file, line=text.count("\n", 0, odd.start()) + 1)
    return text


_ODD_BREAKS = re.compile("[\u0085\u2028\u2029]")


# What PyYAML quotes that is not the file's own text: a token's name, one character, a
# standard tag.
_KEPT_QUOTE = re.compile(r"tag:yaml\.org,2002:[\w/.:-]*|<[a-z ]+>|\\?.|\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\U[0-9a-f]{8}")


def _unquoted(text: str) -> str:
    """PyYAML's message without what it quotes from the file (a tag, an anchor)."""
    def keep(match: re.Match) -> str:
        inner = match.group(0)[1:-1]
        return match.group(0) if _KEPT_QUOTE.fullmatch(inner) else "(not shown)"
    return re.sub(r"'[^'\n]*'|\"[^\"\n]*\"", keep, text)


def _from_marked_error(exc: yaml.MarkedYAMLError, file: str) -> ScenarioError:
    mark = exc.problem_mark or exc.context_mark
    parts = [_unquoted(p) for p in (exc.context, exc.problem) if p]
    message = "invalid YAML: " + ": ".join(parts) if parts else "invalid YAML"
    if exc.context_mark is not None and exc.problem_mark is not None \
            and exc.context_mark.line != exc.problem_mark.line:
        message += f" (started on line {exc.context_mark.line + 1})"
    if isinstance(exc, yaml.constructor.ConstructorError) and exc.problem \
            and exc.problem.startswith("could not determine a constructor"):
        message += "; only plain data (mappings, lists, strings, numbers, booleans) is allowed"
    return ScenarioError(message, file=file,
                         line=mark.line + 1 if mark else None,
                         column=mark.column + 1 if mark else None)


def _key_of(loader: yaml.SafeLoader, key_node: Node) -> Any:
    """The Python value of a scalar mapping key (None for complex keys)."""
    if not isinstance(key_node, ScalarNode):
        return None
    return loader.construct_object(key_node, deep=True)


def _check_duplicate_keys(loader: yaml.SafeLoader, root: Node, file: str) -> None:
    """Refuse a key written twice in one mapping (merged ``<<`` keys may be overridden)."""
    problems: list[Problem] = []
    visited: set[int] = set()
    stack: list[tuple[Node, Loc]] = [(root, ())]
    while stack:
        node, loc = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if isinstance(node, MappingNode):
            seen: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:
                    stack.append((value_node, loc))
                    continue
                key = _key_of(loader, key_node)
                line = key_node.start_mark.line + 1
                if key is not None and key in seen:
                    first = seen[key]
                    problems.append(Problem(
                        f"duplicate key {short_repr(key)} (first on line {first}, "
                        f"again on line {line})",
                        file=file, line=line, field=dotted_path(loc + (key,))))
                elif key is not None:
                    seen[key] = line
                stack.append((value_node, loc + (key,)))
        elif isinstance(node, SequenceNode):
            for i, item in enumerate(node.value):
                stack.append((item, loc + (i,)))
    if problems:
        problems.sort(key=lambda p: p.line or 0)
        raise ScenarioError.many(problems)


def _record_lines(loader: yaml.SafeLoader, node: Node, loc: Loc, lines: dict[Loc, int],
                  on_path: set[int], budget: list[int], file: str) -> None:
    """Walk the (merge-flattened) node graph, recording the line of each location."""
    budget[0] += 1
    if budget[0] > _MAX_NODES:
        raise ScenarioError(f"aliases expand the document to more than {_MAX_NODES:,} "
                            "values", file=file,
                            line=node.start_mark.line + 1)
    if id(node) in on_path:  # recursive alias: stop
        return
    on_path.add(id(node))
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            key = _key_of(loader, key_node)
            try:
                lines[loc + (key,)] = key_node.start_mark.line + 1
            except TypeError:
                continue
            _record_lines(loader, value_node, loc + (key,), lines, on_path, budget, file)
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            lines[loc + (i,)] = item.start_mark.line + 1
            _record_lines(loader, item, loc + (i,), lines, on_path, budget, file)
    on_path.discard(id(node))
