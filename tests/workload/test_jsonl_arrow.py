"""The C++ fast path for JSON-lines traces reads exactly what the line-by-line reader
reads, or declines and leaves the file to it: on any mix of good and bad lines, both
give the same rows, lines and block ids, or the same error at the same line (but for
bytes that are not UTF-8 past the line where reading stops: each reader decodes ahead
its own way, and may or may not meet them)."""
from __future__ import annotations

import gzip

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.workload import jsonl_arrow, trace_formats
from sim.workload.trace import WorkloadDataError

FIELDS = ("timestamp", "input_length", "output_length")


def row(t, ids="") -> bytes:
    return (f'{{"timestamp": {t}, "input_length": 5, "output_length": 2{ids}}}\n').encode()


ODD_LINES = [b"\n", b"   \n", b'{"timestamp": 1, "input_length": "5", "output_length": 2}\n',
             b'{"timestamp": 1, "input_length": null, "output_length": 2}\n',
             b'{"timestamp": NaN, "input_length": 5, "output_length": 2}\n',
             b'{"timestamp": 1, "input_length": true, "output_length": 2}\n',
             b'{"timestamp": 1, "input_length": 5}\n',
             b'{"timestamp": 1, "input_length": 5, "input_length": 6, "output_length": 2}\n',
             row(1).rstrip(b"\n") + b" " + row(2), row(1).rstrip(b"\n") + b"\r" + row(2),
             row(1).rstrip(b"\n") + b"\r\n", row(1).rstrip(b"\n") + b"\r\r\n",
             row(1, ', "hash_ids": [-1]'),
             row(1, ', "hash_ids": [1.0]'), row(1, ', "hash_ids": null'),
             row(1, ', "hash_ids": [1, 2]'), row(1, ', "hash_ids": []'),
             row(1, ', "x": "\xff"').replace("\xff".encode(), b"\xff"), b"[1, 2]\n",
             b'{"timestamp": 1e400, "input_length": 5, "output_length": 2}\n', b"\x85\n"]


def outcome(path, slow: bool, monkeypatch, **kwargs):
    with monkeypatch.context() as m:
        if slow:
            m.setattr(trace_formats, "read_jsonl_arrow", lambda *a, **k: None)
        try:
            values, lines, ids = trace_formats.read_jsonl_fields(path, FIELDS, **kwargs)
        except WorkloadDataError as exc:
            return "error", str(exc)
    return ({f: v.tolist() for f, v in values.items()}, lines.tolist(),
            None if ids is None else list(ids))


def same(path, monkeypatch, **kwargs):
    fast, slow = (outcome(path, False, monkeypatch, **kwargs),
                  outcome(path, True, monkeypatch, **kwargs))
    if fast != slow:    # text past where reading stops that is not UTF-8: each reader
        # decodes its own way ahead of the line it stops at, so may or may not meet it
        assert slow == ("error", f"{path}: cannot read: not UTF-8 text")
        assert fast[0] != "error" or fast == ("error", f"{path}:{kwargs['max_rows'] + 1}: "
                                                       "too many")
        with pytest.raises(UnicodeDecodeError):
            path.read_bytes().decode("utf-8")


@pytest.mark.parametrize("odd", ODD_LINES)
@pytest.mark.parametrize("ids", [False, True])
@pytest.mark.parametrize("max_rows", [10, 2])
def test_each_odd_line_is_read_alike(tmp_path, monkeypatch, odd, ids, max_rows):
    path = tmp_path / "t.jsonl"
    path.write_bytes(row(0) + odd + row(2) + row(3))
    same(path, monkeypatch, horizon=np.inf, max_rows=max_rows, too_many="too many",
         ids_field="hash_ids" if ids else None)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(good=st.lists(st.integers(0, 50).map(row), max_size=10),
       odd=st.lists(st.tuples(st.integers(0, 10), st.sampled_from(ODD_LINES)), max_size=2),
       bom=st.booleans(), horizon=st.sampled_from([np.inf, 10.0, 30.0]),
       max_rows=st.integers(1, 14), ids=st.booleans(), small=st.booleans())
def test_the_fast_path_reads_alike_or_declines(tmp_path, monkeypatch, good, odd, bom, horizon,
                                               max_rows, ids, small):
    lines = list(good)
    for at, line in odd:            # one or two odd lines among good ones
        lines.insert(at, line)
    path = tmp_path / "t.jsonl"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + b"".join(lines))
    if small:                       # lines across chunk boundaries
        monkeypatch.setattr(jsonl_arrow, "CHUNK_BYTES", 37)
    same(path, monkeypatch, horizon=horizon, max_rows=max_rows, too_many="too many",
         ids_field="hash_ids" if ids else None)


def test_a_long_well_formed_trace_is_read_in_cxx_and_refused_past_its_row_limit(
        tmp_path, monkeypatch):
    """A 1,000-line trace (gzip) is read by the fast path (the line-by-line reader is not
    called), and one over the row limit is refused at the first line past it."""
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(row(t // 10, ', "hash_ids": [%d]' % t)
                                            for t in range(1000))))

    def not_called(*args):
        raise AssertionError("read line by line")
    monkeypatch.setattr(trace_formats.json, "loads", not_called)
    monkeypatch.setattr(jsonl_arrow, "CHUNK_BYTES", 4096)
    values, lines, ids = trace_formats.read_jsonl_fields(path, FIELDS, horizon=50.0,
                                                         ids_field="hash_ids")
    assert values["timestamp"][-1] == 50 and len(lines) == 501 and lines[-1] == 501
    assert ids[:2] == [(0,), (1,)] and len(ids) == 501
    with pytest.raises(WorkloadDataError, match=r"t.jsonl.gz:301: too many"):
        trace_formats.read_jsonl_fields(path, FIELDS, horizon=50.0, max_rows=300,
                                        too_many="too many")
