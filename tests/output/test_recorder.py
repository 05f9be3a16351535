"""Columnar recording: rows buffered as tuples, written into numpy columns in blocks."""
from __future__ import annotations

import numpy as np
import pytest

from sim.recording import recorder
from sim.output.columns import Coded
from sim.recording.recorder import ColumnTable


def test_rows_across_buffer_flushes_and_column_growth_come_back_in_order(monkeypatch):
    monkeypatch.setattr(recorder, "BUFFER_ROWS", 7)
    table = ColumnTable({"i": "int64", "x": "float64", "c": "int8"}, capacity=4)
    n = 50
    for i in range(n):
        table.append(i, i / 4.0, i % 3)
        assert len(table) == i + 1
        if i == 20:                      # reading mid-run flushes what is buffered
            assert table.column("i").tolist() == list(range(21))
    columns = table.columns()
    assert columns["i"].tolist() == list(range(n))
    np.testing.assert_array_equal(columns["x"], np.arange(n) / 4.0)
    assert columns["c"].dtype == np.int8 and columns["c"].tolist() == [i % 3 for i in range(n)]


def test_a_row_with_a_missing_field_is_an_error_not_a_shifted_column(monkeypatch):
    monkeypatch.setattr(recorder, "BUFFER_ROWS", 2)
    table = ColumnTable({"a": "int64", "b": "int64"})
    table.append(1, 2)
    with pytest.raises(ValueError, match="2 fields"):
        table.append(3)


def test_codes_intern_each_name_once_in_first_seen_order_and_decode_back():
    codes = recorder.Codes(("completed", "rejected"))
    assert codes["completed"] == 0 and codes["rejected"] == 1
    assert codes["team-b"] == 2 and codes["team-a"] == 3
    assert codes["team-b"] == 2 and codes.code("team-a") == 3     # known names keep their code
    assert codes.names == ["completed", "rejected", "team-b", "team-a"]
    decoded = Coded(np.array([3, 0, 2], dtype=np.int32), codes.names).strings()
    assert list(decoded) == ["team-a", "completed", "team-b"]


# -- the request row, declared once ------------------------------------------------------------
def test_each_request_column_holds_the_attribute_it_declares():
    """A request whose every recorded attribute has its own value: each column of the
    recorded row reads back that attribute (interned strings decoded), so no two
    columns can be swapped and a new field is read where it is declared."""
    from sim.recording.recorder import REQUEST_ROW, Recorder
    from sim.entities.request import Request
    from sim.output.results import REQUEST_TABLE_COLUMNS
    assert len({f.column for f in REQUEST_ROW}) == len(REQUEST_ROW)
    assert {f.column for f in REQUEST_ROW if f.in_table} <= set(REQUEST_TABLE_COLUMNS)
    assert not {f.column for f in REQUEST_ROW if not f.in_table} & set(REQUEST_TABLE_COLUMNS)
    req = Request(41, 3, "team-a", "model-b", "pool-c", 7, 1.25, 100, 50)
    values = {}
    for k, f in enumerate(REQUEST_ROW):
        if f.codes is not None:
            value = f"{f.attr}-value"
        elif np.dtype(f.dtype).kind == "f":
            value = 1000.5 + k
        else:
            value = 1000 + k
        setattr(req, f.attr, value)
        values[f.column] = value
    rec = Recorder()
    rec.record_request(req)
    raw = {f.column: rec.requests.column(f.column)[0] for f in REQUEST_ROW}
    for f in REQUEST_ROW:
        got = raw[f.column]
        if f.codes is not None:
            got = Coded(np.array([got]), rec.code_table(f).names).strings()[0]
        assert got == values[f.column], f.column
        assert rec.requests.column(f.column).dtype == np.dtype(f.dtype)


# -- sampled and step rows keep their fractions ------------------------------------------------
def test_float_fields_of_row_types_are_stored_as_floats():
    """Every field a row type declares ``float`` is a float column (under postponed
    annotations the declarations are names, and a missed lookup made them int32)."""
    from typing import get_type_hints
    from sim.recording.recorder import PoolSample, StepRow, columns_of
    for row in (PoolSample, StepRow):
        for name, kind in get_type_hints(row).items():
            assert np.dtype(columns_of(row)[name]).kind == ("f" if kind is float else "i"), name


def test_sample_times_and_step_times_are_not_truncated(tmp_path):
    import sim
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: ts\nseed: 1\nduration: 3s\ndrain: 2s\nsample_interval: 250ms\nrecord_steps: true\n"
        "workload:\n  streams:\n    s:\n      team: t\n      model: llama-3.1-8b\n"
        "      arrival: {type: poisson, rate: 4/s}\n      prompt_tokens: 200\n"
        "      output_tokens: 50\n"
        "pools:\n  p: {model: llama-3.1-8b, hardware: H100-SXM, replicas: 1}\n")
    res = sim.run(sim.load_scenario(path))
    times = res.timeseries["time_s"].to_numpy()
    np.testing.assert_allclose(np.diff(times[:5]), 0.25)
    steps = res.steps
    assert (steps["end_s"] > steps["start_s"]).all()            # a step takes milliseconds
    assert (steps["end_s"] - steps["start_s"]).max() < 1.0
