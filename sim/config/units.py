"""Parse quantities with units ("2s", "50ms", "80GB", "3.35TB/s") into SI floats.

Numbers without a unit are taken in the field's base unit (seconds, bytes,
bytes/s, FLOP/s), so a YAML author may write either ``warmup: 60`` or
``warmup: 60s``; a latency target (:func:`seconds_with_unit`) takes no bare
number. Anything else is a ValueError whose message lists the accepted units;
pydantic turns it into a field error.
"""
from __future__ import annotations

import math
import re

_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
# ASCII digits and spaces only: Python's \d and float() also take full-width and other
# scripts' digits ("２s"), which no scenario author means to type
_PATTERN = re.compile(rf"^[ \t]*{_NUMBER}[ \t]*([A-Za-zµ/%]*)[ \t]*$", re.ASCII)

TIME_UNITS_S = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6,
                "ns": 1e-9, "min": 60.0, "m": 60.0, "h": 3600.0, "hr": 3600.0, "d": 86400.0}
BYTE_UNITS = {"": 1.0, "B": 1.0, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
              "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40}
BANDWIDTH_UNITS = {"": 1.0, "B/s": 1.0, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12,
                   "GiB/s": 2.0**30, "TiB/s": 2.0**40}
FLOPS_UNITS = {"": 1.0, "FLOP/s": 1.0, "GFLOP/s": 1e9, "TFLOP/s": 1e12, "PFLOP/s": 1e15}
RATE_UNITS = {"": 1.0, "/s": 1.0, "/min": 1 / 60.0, "/h": 1 / 3600.0}


def _parse(value: object, units: dict[str, float], kind: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a {kind}, got a boolean")
    if isinstance(value, (int, float)):
        out = float(value)
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        unit = match.group(2) if match else None
        if match is None or unit not in units:
            choices = ", ".join(repr(u) for u in units if u)
            raise ValueError(f"cannot read {value!r} as a {kind}; write a number "
                             f"optionally followed by one of {choices}")
        out = float(match.group(1)) * units[unit]
    else:
        raise ValueError(f"expected a {kind} (number or string with unit), "
                         f"got {type(value).__name__}")
    if not math.isfinite(out):
        raise ValueError(f"{kind} must be finite, got {value!r}")
    return out


def seconds(value: object) -> float:
    """``"50ms"`` -> 0.05; a bare number is seconds."""
    return _parse(value, TIME_UNITS_S, "duration")


def seconds_with_unit(value: object) -> float:
    """A latency target: ``"50ms"`` -> 0.05, but never a bare number. vLLM's ``--goodput``,
    GuideLLM and AIConfigurator read a bare SLO number as milliseconds, fleetsim's other
    durations as seconds: a target whose unit is left to the reader is refused, with both
    readings shown, rather than read one way without a word."""
    match = _PATTERN.match(value) if isinstance(value, str) else None
    if match is not None and match.group(2) == "":
        number = match.group(1)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = f"{value:g}"
    else:
        number = None
    if number is not None:
        raise ValueError(f"{number} has no unit: write {number}ms ({number} milliseconds, "
                         f"as vLLM's --goodput and GuideLLM read a bare number) or {number}s "
                         f"({number} seconds); a latency target takes no bare number")
    return seconds(value)


def bytes_(value: object) -> float:
    """``"80GB"`` -> 8e10; ``"20GiB"`` -> 2**30 * 20; a bare number is bytes."""
    return _parse(value, BYTE_UNITS, "size in bytes")


def bandwidth(value: object) -> float:
    """``"3.35TB/s"`` -> 3.35e12 bytes/s."""
    return _parse(value, BANDWIDTH_UNITS, "bandwidth")


def flops(value: object) -> float:
    """``"989TFLOP/s"`` -> 9.89e14 FLOP/s."""
    return _parse(value, FLOPS_UNITS, "compute rate")


def rate_per_s(value: object) -> float:
    """``"600/min"`` -> 10 per second."""
    return _parse(value, RATE_UNITS, "rate")
