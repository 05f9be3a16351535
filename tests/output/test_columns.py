"""A run's numpy columns (sim/output/columns.py): what the summary and the data files are
made from without pandas, and the DataFrames made from them on first use."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from sim.output.columns import Coded, Table


def _table() -> Table:
    return Table({"x": np.array([1.5, np.nan, 3.0]),
                  "n": np.array([1, 2, 3], dtype=np.int32),
                  "who": Coded(np.array([1, -1, 0]), ["=a", "b"]),
                  "text": np.array(["+c", None, "d"], dtype=object)})


def test_coded_compares_selects_and_decodes_like_a_categorical():
    who = _table()["who"]
    assert (who == "b").tolist() == [True, False, False]
    assert (who != "b").tolist() == [False, True, True]
    assert (who == "nobody").tolist() == [False] * 3       # no code: no row, not the -1s
    assert who.isin(["=a", "nobody"]).tolist() == [False, False, True]
    assert who[np.array([True, False, True])].strings().tolist() == ["b", "=a"]
    assert np.asarray(who).tolist() == ["b", None, "=a"]
    cat = who.categorical()
    assert list(cat.categories) == ["=a", "b"] and pd.isna(cat[1]) and cat[0] == "b"


def test_rows_by_mask_and_columns_of_one_length():
    t = _table()
    picked = t[np.array([False, True, True])]
    assert len(picked) == 2 and picked["n"].tolist() == [2, 3]
    assert picked.columns == ["x", "n", "who", "text"]
    with pytest.raises(ValueError, match="different lengths"):
        Table({"a": np.zeros(2), "b": np.zeros(3)})
    with pytest.raises(ValueError, match="has 2 rows"):
        t["y"] = np.zeros(2)


def test_frame_and_arrow_hold_the_same_values():
    t = _table()
    frame = t.frame()
    assert isinstance(frame["who"].dtype, pd.CategoricalDtype)
    assert frame["n"].dtype == np.int32
    arrow = t.arrow()
    assert pa.types.is_dictionary(arrow.schema.field("who").type)
    assert arrow["x"].to_pylist() == [1.5, None, 3.0]        # NaN as null, as from pandas
    assert arrow["who"].to_pylist() == ["b", None, "=a"]
    assert arrow["text"].to_pylist() == ["+c", None, "d"]
    back = arrow.to_pandas()
    pd.testing.assert_frame_equal(back, frame, check_categorical=False, check_dtype=False)


def test_arrow_renames_every_name_and_text_cell():
    renamed = _table().arrow(rename=lambda s: "'" + s if s[:1] in "=+" else s)
    assert renamed["who"].to_pylist() == ["b", None, "'=a"]
    assert renamed["text"].to_pylist() == ["'+c", None, "d"]


def test_a_run_writing_its_data_files_imports_neither_pandas_nor_matplotlib(tmp_path):
    """pandas is a third of a small run's cost beyond its simulation: ``run --no-report``
    makes its summary and files from the columns alone."""
    code = ("import sys; from sim.cli import main\n"
            "try:\n"
            f"    main(['run', 'scenarios/v1-single.yaml', '--duration', '20', '--no-report',"
            f" '--quiet', '--out', {str(tmp_path / 'out')!r}])\n"
            "except SystemExit as exc:\n"
            "    assert not exc.code, exc.code\n"
            "print(sorted(m for m in ('pandas', 'matplotlib', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
    assert (tmp_path / "out" / "requests.parquet").is_file()
