"""Scenario errors that name the file, line and field, never a traceback.

A :class:`ScenarioError` carries one or more :class:`Problem` records and
renders as compiler-style lines::

    scenarios/x.yaml:12: pools.main.scheduler.type: Input tag 'continous' ...

:mod:`sim.config.validation_errors` turns pydantic's errors into Problems. The CLI prints :func:`format_cli_error` to stderr and exits with
``ScenarioError.exit_code`` (2).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_SHOWN = 20
_INPUT_REPR_CHARS = 60


@dataclass(frozen=True)
class Problem:
    """One located complaint about an input file."""

    message: str
    file: str | None = None
    line: int | None = None
    field: str | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
        elif self.line is not None:
            where = f"line {self.line}"
        field = self.field
        if field and field.startswith("--") and self.message.startswith((field + " ",
                                                                          field + ":")):
            field = None        # a flag's message that opens with the flag names it once
        parts = [p for p in (where, field) if p]
        return ": ".join(parts + [self.message])


class ScenarioError(Exception):
    """Bad scenario input; the CLI reports it without a traceback and exits 2.

    ``file``, ``line``, ``field`` and ``message`` describe the first problem;
    ``problems`` holds all of them (``str()`` shows up to 20, one per line).
    """

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None, column: int | None = None,
                 problems: list[Problem] | None = None) -> None:
        if not problems:
            problems = [Problem(message, file=file, line=line, field=field, column=column)]
        self.problems: list[Problem] = list(problems)
        first = self.problems[0]
        self.message = first.message
        self.file = first.file
        self.line = first.line
        self.field = first.field
        self.column = first.column
        super().__init__(str(self))

    @classmethod
    def many(cls, problems: list[Problem]) -> ScenarioError:
        """One error reporting several problems (at least one)."""
        if not problems:
            raise ValueError("ScenarioError.many needs at least one problem")
        return cls(problems[0].message, problems=problems)

    def __str__(self) -> str:
        lines = [str(p) for p in self.problems[:MAX_SHOWN]]
        if len(self.problems) > MAX_SHOWN:
            lines.append(f"... and {len(self.problems) - MAX_SHOWN} more")
        return "\n".join(lines)

    def __reduce__(self):  # keep all problems when pickled (e.g. across processes)
        return (_rebuild, (type(self), self.problems))


def _rebuild(cls: type[ScenarioError], problems: list[Problem]) -> ScenarioError:
    return cls(problems[0].message, problems=problems)


def dotted_path(loc: tuple[Any, ...]) -> str:
    """``("pools", "main", "phases", 0, "rate")`` -> ``pools.main.phases[0].rate``.

    A key that is not printable or is long is shown as a shortened repr, so a
    name holding control characters cannot reach the terminal raw.
    """
    out = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            text = str(part)
            if not text.isprintable() or len(text) > _INPUT_REPR_CHARS:
                text = short_repr(text)
            out += ("." if out else "") + text
    return out


def format_cli_error(err: BaseException) -> str:
    """Text for stderr: every line starts with ``error: ``."""
    if isinstance(err, ScenarioError):
        body = str(err)
    elif isinstance(err, OSError) and err.filename is not None:
        body = f"{err.filename}: {err.strerror or err}"
    else:
        body = str(err) or type(err).__name__
    return "\n".join(f"error: {line}" for line in body.splitlines() or [""])


def short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _INPUT_REPR_CHARS else text[: _INPUT_REPR_CHARS - 3] + "..."


Loc = tuple     # where a problem is: a field's path in the scenario, ("pools", "main", "tp")


def choices(names) -> str:
    """Names as an error message lists the valid ones: sorted, case aside, comma separated."""
    return ", ".join(sorted(names, key=str.lower))
