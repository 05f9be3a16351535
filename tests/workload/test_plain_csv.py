"""A plain CSV of numbers is read without pandas, to the same bits as the pandas reader;
anything else is left to that reader, whose errors stay as they were."""
from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from sim.workload import trace
from sim.workload.plain_csv import read_plain_columns

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ("timestamp", "prompt_tokens", "output_tokens")
HEADER = "timestamp,prompt_tokens,output_tokens\n"


def by_pandas(path: Path, columns=COLUMNS, **kw):
    """What the pandas reader alone answers (the plain reader switched off)."""
    with mock.patch.object(trace, "read_plain_columns", lambda *a, **k: None):
        return trace.read_csv_columns(path, columns, **kw)


def plain(path: Path, columns=COLUMNS, max_rows=10**9, enough=None):
    return read_plain_columns(path, columns, trace.open_data, max_rows, enough)


def same(a, b) -> bool:
    return (a[0].keys() == b[0].keys() and np.array_equal(a[1], b[1])
            and a[1].dtype == b[1].dtype
            and all(a[0][k].dtype == b[0][k].dtype
                    and a[0][k].tobytes() == b[0][k].tobytes() for k in a[0]))


def test_a_plain_trace_is_read_without_importing_pandas():
    """The shipped peer list (a gzip CSV of numbers) is set up without pandas' import."""
    code = ("import sys, sim; s = sim.load_scenario('scenarios/bench-peer.yaml'); "
            "sim.api.prepare(s); print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("text", [
    HEADER + "0.5,100,10\n1.25,200,20\n4,400,40\n",
    HEADER + "0.5,100,10\n1.25,200,20\n4,400,40",                    # no final newline
    HEADER.replace("\n", "\r\n") + "0.5,100,10\r\n1.25,200,20\r\n",   # Windows lines
    "extra, timestamp ,output_tokens,prompt_tokens\nx, 0.1 ,3, 7\ny,2e3,4,8\n",
    HEADER + "0.30000000000000004,1,1\n1e-7,2,2\n123456789.123456789,3,3\n-0,4,4\n",
])
def test_plain_files_read_to_the_same_bits_as_pandas(tmp_path, text):
    path = tmp_path / "t.csv"
    path.write_text(text, newline="")
    got = plain(path)
    assert got is not None and same(got, by_pandas(path))


def test_a_shipped_trace_reads_the_same_both_ways():
    path = ROOT / "scenarios" / "traces" / "peer-conv-40000.csv.gz"
    got = plain(path)
    assert got is not None and len(got[1]) == 40_000 and same(got, by_pandas(path))


def test_enough_cuts_the_rows_as_the_pandas_reader_does(tmp_path):
    path = tmp_path / "t.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(HEADER + "".join(f"{t},1,1\n" for t in range(10)) + "x,y,z\n")

    def enough(cols):
        return int(np.searchsorted(cols["timestamp"], 4.5))
    got = plain(path, enough=enough)
    # the row past the end is not a number: the plain reader leaves the file to pandas,
    # which reads no further than it is asked either
    assert got is None
    assert list(by_pandas(path, enough=enough)[0]["timestamp"]) == [0, 1, 2, 3, 4]
    path.write_bytes(gzip.compress((HEADER + "".join(f"{t},1,1\n" for t in range(10)))
                                   .encode()))
    got = plain(path, enough=enough)
    assert got is not None and same(got, by_pandas(path, enough=enough))
    assert list(got[1]) == [2, 3, 4, 5, 6]


@pytest.mark.parametrize("text", [
    HEADER + '"0.5",100,10\n',                       # a quote
    HEADER + "0.5,100,10\n\n1,2,3\n",                # a blank line
    HEADER + "0.5,100\n1,2,3,4\n",                   # rows of other widths, the same commas
    HEADER + "0.5,100,10,9\n",                       # a row wider than the header
    HEADER + "1_0,100,10\n",                         # float() reads it, pandas does not
    HEADER + "inf,100,10\n",
    HEADER + "nan,100,10\n",
    HEADER + "0.5,,10\n",
    HEADER + "0x10,100,10\n",
    HEADER + "0.5\r100,10\n",                        # a lone carriage return
    "timestamp,timestamp,prompt_tokens,output_tokens\n1,2,3,4\n",   # a column named twice
    "t,prompt_tokens,output_tokens\n1,2,3\n",        # a column missing
    HEADER,                                          # no rows
    "\ufeff" + HEADER + "1,2,3\n",                   # not ASCII
])
def test_anything_else_is_left_to_the_pandas_reader(tmp_path, text):
    path = tmp_path / "t.csv"
    path.write_text(text, newline="", encoding="utf-8")
    assert plain(path) is None


def test_more_rows_than_allowed_is_the_pandas_readers_error(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "1,2,3\n2,2,3\n3,2,3\n")
    assert plain(path, max_rows=2) is None
    with pytest.raises(trace.WorkloadDataError, match="more than 2 rows") as err:
        trace.read_csv_columns(path, COLUMNS, max_rows=2)
    assert err.value.line == 4
