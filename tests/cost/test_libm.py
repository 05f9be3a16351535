"""Step times do not depend on the CPU: the cost models' logarithms, exponentials and
powers of arrays are the C library's, element by element (numpy's own kernels on an
AVX-512 CPU differ from them in the last bit, which reordered events of
scenarios/overload.yaml on such a machine)."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np

from sim.cost import libm
from sim.cost.tables import PerKeyTable, Table

# many values, spread over the range step times see (tokens, sequences, KV lengths)
X = np.concatenate([np.linspace(1.0, 5000.0, 4001), np.geomspace(1e-3, 1e7, 3001)])


def test_each_function_is_the_c_librarys_bit_for_bit():
    assert libm.log(X).tolist() == [math.log(v) for v in X]
    assert libm.exp(X / 1e6).tolist() == [math.exp(v) for v in X / 1e6]
    assert libm.power(0.75, X[:500]).tolist() == [math.pow(0.75, v) for v in X[:500]]


def test_shapes_are_kept():
    assert libm.log(np.float64(2.0)).shape == ()
    assert libm.exp(np.zeros((2, 3))).shape == (2, 3)


def test_a_calibrated_table_interpolates_with_the_c_librarys_log_and_exp():
    table = Table([[1, 0.001], [64, 0.002], [4096, 0.02]], "t")
    inside = X[(X >= 1) & (X <= 4096)]
    want = [math.exp(np.interp(math.log(v), table._lx, table._lt)) for v in inside]
    assert table(inside).tolist() == want
    keys = PerKeyTable([[1, 1e-9], [512, 3e-9]], "k")
    assert keys(inside).tolist() == [np.interp(math.log(v), keys._lq, keys._s)
                                     if v <= 512 else 3e-9 * v / 512 for v in inside]


def test_the_same_with_numpys_avx512_kernels_switched_off():
    """A calibrated table's step times are the same in a process where numpy may not use
    AVX-512 (where the CPU has none, the two runs are alike anyway)."""
    code = ("import numpy as np, sys; from sim.cost.tables import Table; "
            "x = np.linspace(1e-3, 5000.0, 20001); "
            "t = Table([[1, 0.001], [64, 0.002], [4096, 0.02]], 't'); "
            "sys.stdout.write(t(x).tobytes().hex())")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, **extra}).stdout
            for extra in ({}, {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"})]
    assert runs[0] == runs[1]
