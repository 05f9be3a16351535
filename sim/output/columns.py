"""A run's tables as numpy columns, without pandas.

The summary, summary.json, requests.parquet and the CSV files are made from these
columns directly: importing pandas is a third of a small run's cost beyond its
simulation. ``Table.frame()`` gives the pandas DataFrame (the Python API's
``Results.requests``, the plots, notebooks), and ``Table.arrow()`` the Arrow table
the files are written from.

A column is a numpy array, or a :class:`Coded` column of names held as small integer
codes (pandas' Categorical, as the recorder interns them). Both answer ``==`` with a
name, ``isin``, boolean-mask selection and ``np.asarray`` the way a pandas Series does,
so a function over them (the SLO verdicts) works on a DataFrame as well.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np


class Coded:
    """Names held as integer codes into ``names`` (-1: none)."""

    __slots__ = ("codes", "names")
    __hash__ = None                      # compared by value, like an array

    def __init__(self, codes: np.ndarray, names: Iterable[str]) -> None:
        self.codes = np.asarray(codes)
        self.names = list(names)

    def __len__(self) -> int:
        return len(self.codes)

    def _code(self, name: Any) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            return -2                    # no code: matches nothing (not even "none")

    def __eq__(self, name: Any) -> np.ndarray:      # type: ignore[override]
        return self.codes == self._code(name)

    def __ne__(self, name: Any) -> np.ndarray:      # type: ignore[override]
        return ~(self == name)

    def isin(self, names: Iterable[str]) -> np.ndarray:
        wanted = [self._code(n) for n in names]
        return np.isin(self.codes, [c for c in wanted if c >= 0])

    def __getitem__(self, rows) -> "Coded":
        return Coded(self.codes[rows], self.names)

    def strings(self) -> np.ndarray:
        """The names, one per row, as an object array (None where there is none)."""
        lookup = np.array(self.names + [None], dtype=object)
        return lookup[np.where(self.codes >= 0, self.codes, len(self.names))]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.strings()
        return out if dtype is None else out.astype(dtype)

    def categorical(self):
        import pandas as pd
        return pd.Categorical.from_codes(self.codes.astype(np.int64), categories=self.names)

    def arrow(self, names: list[str] | None = None):
        """A dictionary array (the Categorical's Arrow form); ``names`` in place of the
        column's own (the same number, in code order)."""
        import pyarrow as pa
        codes = self.codes.astype(np.int32)
        return pa.DictionaryArray.from_arrays(_arrow_numbers(codes, codes < 0),
                                              _arrow_strings(names or self.names))


# Arrow arrays from their buffers: ``pyarrow.array`` imports pandas to ask whether its
# input is a pandas object, which is most of what writing a small run's files costs.

def _validity(null: np.ndarray | None):
    import pyarrow as pa
    if null is None or not null.any():
        return None, 0
    return pa.py_buffer(np.packbits(~null, bitorder="little")), int(null.sum())


def _arrow_numbers(values: np.ndarray, null: np.ndarray | None = None):
    """A numeric array sharing ``values``' memory; null where ``null`` is true."""
    import pyarrow as pa
    values = np.ascontiguousarray(values)
    valid, nulls = _validity(null)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values),
                                 [valid, pa.py_buffer(values)], null_count=nulls)


def _arrow_strings(values):
    """A string array of ``values`` (text, or None for null)."""
    import pyarrow as pa
    data = [v.encode("utf-8") if v is not None else b"" for v in values]
    offsets = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    valid, nulls = _validity(np.array([v is None for v in values], dtype=bool))
    return pa.Array.from_buffers(pa.large_string(), len(data),
                                 [valid, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))],
                                 null_count=nulls)


class Table:
    """Named columns of one length, in order. ``table[name]`` is a column,
    ``table[mask]`` the rows where a boolean array is true (a new table)."""

    def __init__(self, columns: dict[str, Any]) -> None:
        self._cols = dict(columns)
        lengths = {len(c) for c in self._cols.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")

    @property
    def columns(self) -> list[str]:
        return list(self._cols)

    def __len__(self) -> int:
        return len(next(iter(self._cols.values()))) if self._cols else 0

    def __getitem__(self, key):
        if isinstance(key, str):
            return self._cols[key]
        rows = np.asarray(key)
        return Table({name: col[rows] for name, col in self._cols.items()})

    def __setitem__(self, name: str, column) -> None:
        if self._cols and len(column) != len(self):
            raise ValueError(f"column {name!r} has {len(column)} rows, the table {len(self)}")
        self._cols[name] = column

    def frame(self):
        """The pandas DataFrame: Coded columns as Categoricals, arrays as they are."""
        import pandas as pd
        return pd.DataFrame({name: col.categorical() if isinstance(col, Coded) else col
                             for name, col in self._cols.items()}, copy=False)

    def arrow(self, rename=None):
        """The Arrow table: Coded columns as dictionary arrays, a float's NaN as null (as
        pandas hands a DataFrame to Arrow). ``rename(text) -> text`` is applied to every
        name a Coded column holds, every text cell and every column's name."""
        import pyarrow as pa
        same = rename or (lambda text: text)
        arrays = []
        for col in self._cols.values():
            if isinstance(col, Coded):
                arrays.append(col.arrow([same(n) for n in col.names]))
            elif col.dtype == object:
                arrays.append(_arrow_strings([same(v) if isinstance(v, str) else v
                                              for v in col]))
            else:
                arrays.append(_arrow_numbers(col, np.isnan(col) if col.dtype.kind == "f"
                                             else None))
        return pa.Table.from_arrays(arrays, names=[same(n) for n in self._cols])
