"""Logarithms, exponentials and powers of arrays that are the same on every machine.

numpy takes other code paths for ``np.log``, ``np.exp`` and ``np.power`` on CPUs with
AVX-512 (its own vectorised kernels) than on others (the C library's), and the two can
differ in the last bit. A last bit can reorder two events of a run, so a step time must
not depend on the CPU: these apply the C library's function (Python's ``math``) to each
element, as numpy itself does without AVX-512.
"""
from __future__ import annotations

import math

import numpy as np


def _each(fn, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    out = np.fromiter(map(fn, x.ravel().tolist()), dtype=np.float64, count=x.size)
    return out.reshape(x.shape)


def log(x) -> np.ndarray:
    return _each(math.log, x)


def exp(x) -> np.ndarray:
    return _each(math.exp, x)


def power(base: float, x) -> np.ndarray:
    """``base ** x`` for a scalar base and an array of exponents."""
    return _each(lambda e: math.pow(base, e), x)
