"""The fewest and most tokens a stream's length distributions can draw, read from the
configuration alone (None where only a data file knows, or a distribution is unbounded)."""
from __future__ import annotations


def shortest(length) -> int | None:
    """The fewest tokens a length distribution can draw; None when only its data file
    knows (an empirical column read from a CSV)."""
    kind = getattr(length, "type", None)
    if kind == "fixed":
        return length.value
    if kind == "uniform":
        return length.low
    if kind in ("lognormal", "exponential"):
        return length.min
    if kind == "empirical":
        return min(length.values) if length.values else None
    if kind == "mixture":
        each = [shortest(c.dist) for c in length.components]
        return None if None in each else min(each)
    return None


def longest(length) -> int | None:
    """The most tokens a length distribution can draw; None when unbounded or only its
    data file knows."""
    kind = getattr(length, "type", None)
    if kind == "fixed":
        return length.value
    if kind == "uniform":
        return length.high
    if kind in ("lognormal", "exponential"):
        return length.max
    if kind == "empirical":
        return max(length.values) if length.values else None
    if kind == "mixture":
        each = [longest(c.dist) for c in length.components]
        return None if None in each else max(each)
    return None


def prompt_range(stream) -> tuple[int | None, int | None]:
    """The fewest and most prompt tokens (its shared prefix included) ``stream`` sends;
    None where unknown before its data is read."""
    if stream.prompt_tokens is None:
        return None, None
    prefix = stream.prefix.tokens if stream.prefix is not None else 0
    least, most = shortest(stream.prompt_tokens), longest(stream.prompt_tokens)
    return (None if least is None else least + prefix, None if most is None else most + prefix)


def least_request(stream) -> int | None:
    """The fewest tokens (prefix + prompt + output) one of ``stream``'s requests has."""
    if stream.prompt_tokens is None or stream.output_tokens is None:
        return None
    prompt, output = prompt_range(stream)[0], shortest(stream.output_tokens)
    return None if prompt is None or output is None else prompt + output
