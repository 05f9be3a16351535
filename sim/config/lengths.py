"""The fewest and most tokens a stream's length distributions can draw, read from the
configuration alone (None where only a data file knows, or a distribution is unbounded)."""
from __future__ import annotations


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
    None where unknown before its data is read."""
    if stream.prompt_tokens is None:
        return None, None
    prefix = stream.prefix.tokens if stream.prefix is not None else 0
    least, most = bounds(stream.prompt_tokens)
    return (None if least is None else least + prefix, None if most is None else most + prefix)


def least_request(stream) -> int | None:
    """The fewest tokens (prefix + prompt + output) one of ``stream``'s requests has."""
    if stream.prompt_tokens is None or stream.output_tokens is None:
        return None
    prompt, output = prompt_range(stream)[0], shortest(stream.output_tokens)
    return None if prompt is None or output is None else prompt + output
