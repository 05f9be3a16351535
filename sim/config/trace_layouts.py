"""The trace formats a scenario may name (``arrival: {type: trace, format: NAME}``), one
registry read by both sides: the scenario's validation (the names it accepts, listed in
its errors and in ``fleetsim schema``) and the reader (:mod:`sim.workload.trace_formats`:
which fields hold a row's arrival time and lengths, in what unit, read how). A format is
added by one :func:`register_trace_format` (see docs/recipes.md, "A trace format").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class TraceLayout:
    """Where a format keeps a row's three values, and how its rows are read."""

    # the fields (CSV columns, JSON keys) of the arrival time, the prompt's tokens and the
    # output's tokens
    fields: tuple[str, str, str]
    # the arrival time's unit: seconds, milliseconds, microseconds, or dates and times
    # (offsets from the first row's)
    timestamp_unit: Literal["s", "ms", "us", "datetime"]
    # how rows are read: a CSV (columns by name, in chunks) or one JSON object a line
    reader: Literal["csv", "jsonl"] = "csv"
    # JSON lines: the field holding a row's list of its prompt's block ids (shared ids are
    # shared prefix blocks, of the stream's block_tokens each); None: the format has none
    ids_field: str | None = None
    # whether a scenario may rename its fields and unit (``columns:``, ``timestamp_unit:``)
    configurable: bool = False


TRACE_FORMATS: dict[str, TraceLayout] = {
    "csv": TraceLayout(("timestamp", "prompt_tokens", "output_tokens"), "s",
                       configurable=True),
    # the Azure LLM inference traces (2023, 2024)
    "azure": TraceLayout(("TIMESTAMP", "ContextTokens", "GeneratedTokens"), "datetime"),
    # the Mooncake traces (FAST '25): JSON lines, with each prompt's block hashes
    "mooncake": TraceLayout(("timestamp", "input_length", "output_length"), "ms",
                            reader="jsonl", ids_field="hash_ids"),
}


def register_trace_format(name: str, layout: TraceLayout) -> None:
    """Accept ``format: name`` from now on, read as ``layout`` says."""
    if name in TRACE_FORMATS:
        raise ValueError(f"trace format {name!r} is taken")
    if not isinstance(layout, TraceLayout):
        raise TypeError(f"a trace format is a TraceLayout, not {type(layout).__name__}")
    TRACE_FORMATS[name] = layout


def unregister_trace_format(name: str) -> None:
    """Take a registered format out again (a plugin unloaded, a test's toy)."""
    del TRACE_FORMATS[name]


def format_choices() -> str:
    """The accepted names as pydantic lists a Literal's: 'a', 'b' or 'c'."""
    names = [repr(n) for n in TRACE_FORMATS]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
