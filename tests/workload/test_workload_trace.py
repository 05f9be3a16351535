"""Trace replay and the errors a broken trace file must produce."""
from __future__ import annotations

import numpy as np
import pytest

from sim.config.workload import WorkloadConfig
from sim.workload import WorkloadDataError, generate_arrivals

HEADER = "timestamp,prompt_tokens,output_tokens\n"


def trace_workload(path="trace.csv", rate_scale=1.0, **arrival):
    return WorkloadConfig(rate_scale=rate_scale, streams={
        "replay": {"arrival": {"type": "trace", "path": path, **arrival}}})


def run(tmp_path, workload, duration_s=1000.0):
    return generate_arrivals(workload, duration_s, np.random.SeedSequence(0), tmp_path)


def test_replay_matches_file(tmp_path):
    (tmp_path / "trace.csv").write_text(HEADER + "0.5,100,10\n1.25,200,20\n1.25,300,30\n4,400,40\n")
    out = run(tmp_path, trace_workload(time_scale=0.5))
    np.testing.assert_array_equal(out.arrival_s, [0.25, 0.625, 0.625, 2.0])
    np.testing.assert_array_equal(out.prompt_tokens, [100, 200, 300, 400])
    np.testing.assert_array_equal(out.output_tokens, [10, 20, 30, 40])
    assert out.prompt_tokens.dtype == np.int64 and out.arrival_s.dtype == np.float64
    assert out.stream_names == ("replay",) and np.all(out.stream_index == 0)


@pytest.mark.parametrize("name, fmt, rows", [
    ("trace.csv", "csv", HEADER + "0,1,1\n5,2,2\n20,3,3\n100,4,4\n" + "0,x,1\n" * 3),
    ("trace.csv.gz", "csv", HEADER + "0,1,1\n5,2,2\n20,3,3\n100,4,4\n" + "0,x,1\n" * 3),
    ("m.jsonl", "mooncake", "".join(f'{{"timestamp": {t}, "input_length": 1, '
                                    f'"output_length": 1}}\n' for t in (0, 5000, 20000,
                                                                        100000))
     + "not json\n"),
    ("a.csv", "azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
     "2023-11-16 18:00:00,1,1\n2023-11-16 18:00:05,2,2\n2023-11-16 18:00:20,3,3\n"
     "2023-11-16 18:01:40,4,4\nyesterday,1,1\n"),
])
def test_a_trace_is_read_only_as_far_as_the_run_needs(tmp_path, name, fmt, rows):
    """Rows timed past the run's end are never read (a 49-million-row gzip bomb took 80 s
    and 4.7 GB before): what follows them, broken or not, costs nothing, looped or not
    (a trace reaching past the run's end plays once); a run long enough to need the
    broken row finds it."""
    import gzip
    data = rows.encode()
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    once = trace_workload(name, format=fmt)
    out = run(tmp_path, once, duration_s=10.0)
    np.testing.assert_array_equal(out.arrival_s, [0.0, 5.0])
    doubled = trace_workload(name, format=fmt, time_scale=0.25)   # the third row at 5 s
    assert len(run(tmp_path, doubled, duration_s=10.0)) == 3
    looped = trace_workload(name, format=fmt, loop=True)
    np.testing.assert_array_equal(run(tmp_path, looped, duration_s=10.0).arrival_s, [0, 5])
    with pytest.raises(WorkloadDataError, match=f"{name}:(5|6)"):
        run(tmp_path, looped, duration_s=300.0)


def test_a_trace_of_more_rows_than_max_requests_is_refused_as_it_is_read(tmp_path):
    """Rows all at one instant compress a thousandfold: a small gzip of millions of them
    is refused at the row past max_requests, located, not after reading them all."""
    import gzip
    (tmp_path / "t.csv.gz").write_bytes(gzip.compress((HEADER + "0,1,1\n" * 5000).encode()))
    with pytest.raises(WorkloadDataError, match=r"t\.csv\.gz:1003: more than 1,000 rows "
                                                r"before the run's end.*max_requests = 1,000"):
        generate_arrivals(trace_workload("t.csv.gz"), 10.0, np.random.SeedSequence(0),
                          tmp_path, max_requests=1000)
    assert len(generate_arrivals(trace_workload("t.csv.gz"), 10.0, np.random.SeedSequence(0),
                                 tmp_path, max_requests=5000)) == 5000


def test_replay_is_cut_at_duration_and_shifted_by_start(tmp_path):
    (tmp_path / "trace.csv").write_text(HEADER + "0,1,1\n5,2,2\n10,3,3\n")
    out = run(tmp_path, trace_workload(), duration_s=10.0)
    np.testing.assert_array_equal(out.arrival_s, [0.0, 5.0])
    w = WorkloadConfig(streams={"r": {"arrival": {"type": "trace", "path": "trace.csv"},
                                      "start": 100, "end": 107}})
    np.testing.assert_array_equal(run(tmp_path, w).arrival_s, [100.0, 105.0])


def test_rate_scale_speeds_up_replay(tmp_path):
    (tmp_path / "trace.csv").write_text(HEADER + "0,1,1\n2,2,2\n6,3,3\n")
    out = run(tmp_path, trace_workload(rate_scale=2.0))
    np.testing.assert_array_equal(out.arrival_s, [0.0, 1.0, 3.0])


def test_loop_fills_duration(tmp_path):
    rows = "".join(f"{t},{t + 1},{t + 2}\n" for t in range(4))
    (tmp_path / "trace.csv").write_text(HEADER + rows)
    out = run(tmp_path, trace_workload(loop=True), duration_s=20.0)
    # Period = last timestamp (3) + mean gap (1) = 4, so copies tile 0..19 exactly.
    np.testing.assert_array_equal(out.arrival_s, np.arange(20.0))
    np.testing.assert_array_equal(out.prompt_tokens, np.tile([1, 2, 3, 4], 5))
    out_fast = run(tmp_path, trace_workload(loop=True, time_scale=0.5), duration_s=20.0)
    np.testing.assert_array_equal(out_fast.arrival_s, np.arange(40.0) / 2)
    no_loop = run(tmp_path, trace_workload(), duration_s=20.0)
    assert len(no_loop) == 4


def test_absolute_path_and_blank_lines(tmp_path):
    path = tmp_path / "sub" / "t.csv"
    path.parent.mkdir()
    path.write_text(HEADER + "1,5,6\n\n2,7,8\n")
    out = generate_arrivals(trace_workload(path=str(path)), 10.0,
                            np.random.SeedSequence(0), tmp_path / "elsewhere")
    np.testing.assert_array_equal(out.arrival_s, [1.0, 2.0])


@pytest.mark.parametrize("body, line, message", [
    ("0,1,1\n2,1,1\n1,1,1\n", 4, "decrease"),
    ("0,1,1\n-1,1,1\n", 3, "negative"),
    ("0,1,1\nabc,1,1\n", 3, "'timestamp': not a finite number"),
    ("0,1,1\n1,,1\n", 3, "missing value"),
    ("0,1,1\n1,2.5,1\n", 3, "whole number"),
    ("0,1,0\n", 2, "whole number"),
])
def test_bad_rows_name_file_and_line(tmp_path, body, line, message):
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + body)
    with pytest.raises(WorkloadDataError, match=message) as info:
        run(tmp_path, trace_workload())
    err = info.value
    assert isinstance(err, ValueError)
    assert err.path == path and err.line == line
    assert str(err).startswith(f"{path}:{line}: ")


def test_missing_column_is_named_with_a_near_header_name_only(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("timestamp,prompt_tokens,completion_tokens,output_token\n0,1,1,1\n")
    with pytest.raises(WorkloadDataError) as info:
        run(tmp_path, trace_workload())
    assert info.value.path == path
    assert "'output_tokens'" in info.value.message
    assert "did you mean 'output_token'?" in info.value.message
    assert "'completion_tokens'" not in info.value.message


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(WorkloadDataError, match="not found") as info:
        run(tmp_path, trace_workload(path="absent.csv"))
    assert info.value.path == tmp_path / "absent.csv" and info.value.line is None
    (tmp_path / "trace.csv").write_text(HEADER)
    with pytest.raises(WorkloadDataError, match="no rows"):
        run(tmp_path, trace_workload())
    (tmp_path / "trace.csv").write_text(HEADER + "0,1,1\n0,2,2\n")
    with pytest.raises(WorkloadDataError, match="loop"):
        run(tmp_path, trace_workload(loop=True))


# -- files that are no CSV of numbers, read in bounded memory ------------------------------

def _read(tmp_path, content: bytes):
    from sim.workload.trace import read_csv_columns
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    return read_csv_columns(path, ("a", "b"))


@pytest.mark.parametrize("block_bytes", [7, 2**20])
def test_a_line_too_long_for_a_row_is_refused_at_its_line(tmp_path, monkeypatch, block_bytes):
    import sim.workload.trace as trace
    monkeypatch.setattr(trace, "MAX_CSV_LINE_BYTES", 50)
    monkeypatch.setattr(trace, "_SCAN_BLOCK_BYTES", block_bytes)
    for tail in (b"\n5,6\n", b""):         # a long line in the middle, or one left open
        with pytest.raises(WorkloadDataError, match=r"t\.csv:3: a line is longer") as err:
            _read(tmp_path, b"a,b\n1,2\n3," + b"9" * 100 + tail)
        assert "999" not in str(err.value)
    cols, lines = _read(tmp_path, b"a,b\n1,2\n3," + b"9" * 40 + b"\n")     # below the bound
    assert lines.tolist() == [2, 3]


def test_nul_bytes_are_refused_at_their_line(tmp_path):
    with pytest.raises(WorkloadDataError, match=r"t\.csv:4: holds NUL bytes"):
        _read(tmp_path, b"a,b\n1,2\n3,4\n5\0,6\n")


def test_rows_are_read_in_chunks_with_their_lines(tmp_path, monkeypatch):
    import sim.workload.trace as trace
    monkeypatch.setattr(trace, "_CHUNK_ROWS", 3)
    cols, lines = _read(tmp_path, b"a,b\n1,2\n\n3,4\n5,6\n7,8\n9,10\n")
    assert cols["a"].tolist() == [1, 3, 5, 7, 9] and cols["b"].tolist() == [2, 4, 6, 8, 10]
    assert lines.tolist() == [2, 4, 5, 6, 7]
    with pytest.raises(WorkloadDataError, match=r"t\.csv:5: column 'b': not a finite"):
        _read(tmp_path, b"a,b\n1,2\n3,4\n5,6\n7,x\n9,10\n")


def test_more_rows_than_the_bound_are_refused(tmp_path, monkeypatch):
    import sim.workload.trace as trace
    monkeypatch.setattr(trace, "MAX_CSV_ROWS", 5)
    monkeypatch.setattr(trace, "_CHUNK_ROWS", 3)
    with pytest.raises(WorkloadDataError, match="more than 5 rows"):
        _read(tmp_path, b"a,b\n" + b"1,2\n" * 10)
    assert len(_read(tmp_path, b"a,b\n" + b"1,2\n" * 5)[1]) == 5


# -- trace formats: CSV layouts, Azure, Mooncake, gzip -------------------------------------

def _load(tmp_path, name: str, content: bytes, **cfg):
    from sim.config.workload import TraceArrivalConfig
    from sim.workload.trace_formats import load_trace
    path = tmp_path / name
    path.write_bytes(content)
    return load_trace(path, TraceArrivalConfig(type="trace", path=name, **cfg))


def test_a_csv_of_other_columns_and_units(tmp_path):
    text = b"t_ms,in,out,other\n1500,10,5,x\n2250,20,6,y\n"
    tr = _load(tmp_path, "t.csv", text, columns={"timestamp": "t_ms", "prompt_tokens": "in",
                                                 "output_tokens": "out"}, timestamp_unit="ms")
    assert tr.timestamp_s.tolist() == [1.5, 2.25]
    assert tr.prompt_tokens.tolist() == [10, 20] and tr.output_tokens.tolist() == [5, 6]
    with pytest.raises(WorkloadDataError, match=r"missing column\(s\) 'timestamp'"):
        _load(tmp_path, "t.csv", text)


def test_azure_dates_become_offsets_from_the_first_request(tmp_path):
    text = (b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
            b"2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"
            b"2023-11-16 18:16:00.0000000,10,1\n")
    tr = _load(tmp_path, "a.csv", text, format="azure")
    np.testing.assert_allclose(tr.timestamp_s, [0.0, 4.314579, 13.31941], atol=1e-9)
    assert tr.prompt_tokens.tolist() == [374, 396, 10]
    bad = text.replace(b"2023-11-16 18:16:00.0000000", b"yesterday")
    with pytest.raises(WorkloadDataError, match=r"a\.csv:4: column 'TIMESTAMP': not a date"):
        _load(tmp_path, "a.csv", bad, format="azure")


def test_dates_with_utc_offsets_are_read_on_one_time_line(tmp_path):
    """Times with offsets, mixed with each other and with times without one (read as
    UTC), used to end in pandas' traceback ('Mixed timezones detected')."""
    text = (b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
            b"2023-11-16 18:00:00+02:00,10,1\n2023-11-16 16:00:05,10,1\n"
            b"2023-11-16 17:00:10+01:00,10,1\n")
    tr = _load(tmp_path, "a.csv", text, format="azure")
    np.testing.assert_allclose(tr.timestamp_s, [0.0, 5.0, 10.0], atol=1e-9)


def test_mooncake_jsonl_with_errors_located_by_line(tmp_path):
    rows = (b'{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]}\n'
            b'\n{"timestamp": 1500, "input_length": 70, "output_length": 5, "hash_ids": [2]}\n')
    tr = _load(tmp_path, "m.jsonl", rows, format="mooncake")
    assert tr.timestamp_s.tolist() == [0.0, 1.5] and tr.prompt_tokens.tolist() == [6758, 70]
    for broken, message in [(b'{"timestamp": 3000, "input_length": -4, "output_length": 1}\n',
                             r"m\.jsonl:4: column 'input_length': not a whole number >= 1"),
                            (b'{"timestamp": 3000, "output_length": 1}\n',
                             r"m\.jsonl:4: field 'input_length': missing"),
                            (b"[1, 2]\n", r"m\.jsonl:4: not a JSON object"),
                            (b'{"timestamp": 1000, "input_length": 4, "output_length": 1}\n',
                             r"m\.jsonl:4: column 'timestamp': timestamps must not decrease")]:
        with pytest.raises(WorkloadDataError, match=message):
            _load(tmp_path, "m.jsonl", rows + broken, format="mooncake")


def test_a_jsonl_trace_after_a_byte_order_mark_reads_as_without(tmp_path, monkeypatch):
    """A Windows editor's byte-order mark before the first object is no part of it (it was
    refused as 'not a JSON object'), on the fast path and line by line alike."""
    from sim.workload import trace_formats
    rows = (b'{"timestamp": 0, "input_length": 6758, "output_length": 500}\n'
            b'{"timestamp": 1500, "input_length": 70, "output_length": 5}\n')
    tr = _load(tmp_path, "m.jsonl", b"\xef\xbb\xbf" + rows, format="mooncake")
    assert tr.timestamp_s.tolist() == [0.0, 1.5] and tr.prompt_tokens.tolist() == [6758, 70]
    monkeypatch.setattr(trace_formats, "read_jsonl_arrow", lambda *a, **k: None)
    tr = _load(tmp_path, "m.jsonl", b"\xef\xbb\xbf" + rows, format="mooncake")
    assert tr.timestamp_s.tolist() == [0.0, 1.5] and tr.prompt_tokens.tolist() == [6758, 70]


def test_a_jsonl_object_naming_a_field_twice_is_refused_at_its_line(tmp_path):
    """json.loads keeps the last of two values silently: which one was meant?"""
    rows = (b'{"timestamp": 0, "input_length": 6758, "output_length": 500}\n'
            b'{"timestamp": 1500, "input_length": 70, "output_length": 5, "hash_ids": [1], '
            b'"hash_ids": [2]}\n')
    with pytest.raises(WorkloadDataError, match=r"m\.jsonl:2: field 'hash_ids': given twice"):
        _load(tmp_path, "m.jsonl", rows, format="mooncake")
    with pytest.raises(WorkloadDataError, match=r"m\.jsonl:1: field 'timestamp': given twice"):
        _load(tmp_path, "m.jsonl", b'{"timestamp": 0, "timestamp": 9, "input_length": 1, '
                                   b'"output_length": 1}\n', format="mooncake")


def test_a_jsonl_line_too_long_is_not_called_a_csv(tmp_path):
    long = b'{"timestamp": 0, "input_length": 1, "output_length": 1, "x": "' + b"a" * 70000
    with pytest.raises(WorkloadDataError, match=r"m\.jsonl:1: a line is longer than 64 KiB: "
                                                r"not a row of a JSON-lines trace"):
        _load(tmp_path, "m.jsonl", long + b'"}\n', format="mooncake")


def test_a_gzip_trace_reads_as_its_content_and_a_false_one_is_refused(tmp_path):
    import gzip
    text = HEADER.encode() + b"0.5,100,10\n1.25,200,20\n"
    tr = _load(tmp_path, "t.csv.gz", gzip.compress(text))
    assert tr.timestamp_s.tolist() == [0.5, 1.25] and tr.prompt_tokens.tolist() == [100, 200]
    with pytest.raises(WorkloadDataError, match="not gzip data"):
        _load(tmp_path, "t.csv.gz", text)


def test_layout_settings_belong_to_csv_traces_only():
    from pydantic import ValidationError
    from sim.config.workload import TraceArrivalConfig
    with pytest.raises(ValidationError, match="format 'azure' has its own"):
        TraceArrivalConfig(type="trace", path="a.csv", format="azure", timestamp_unit="ms")


def test_one_column_named_for_two_roles_is_refused(tmp_path, capsys):
    """Mapping two of timestamp, prompt and output lengths to one column is refused where
    the mapping is written (it crashed reading the file)."""
    (tmp_path / "t.csv").write_text("timestamp,prompt_tokens,output_tokens\n0,100,10\n")
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nduration: 30s\nworkload:\n  streams:\n    s:\n      model: m\n"
        "      arrival: {type: trace, path: t.csv, columns: {timestamp: timestamp,\n"
        "                prompt_tokens: timestamp}}\n"
        "pools:\n  main: {model: llama-3.1-8b, hardware: H100-SXM}\n", encoding="utf-8")
    from sim.cli import main
    assert main(["lint", str(path)]) == 2
    err = capsys.readouterr().err
    assert "s.yaml:7: workload.streams.s.arrival.columns" in err
    assert "'timestamp' is named for both timestamp and prompt_tokens" in err


@pytest.mark.parametrize("name, fmt", [("azure-2023-conv.csv.gz", "azure"),
                                       ("mooncake-conversation.jsonl.gz", "mooncake"),
                                       ("mooncake-synthetic.jsonl.gz", "mooncake")])
def test_the_shipped_traces_read_as_their_files_say(name, fmt):
    """Rows, mean lengths and span as pandas or json read them straight from the file."""
    import gzip
    import json
    import pathlib

    import pandas as pd
    path = pathlib.Path(__file__).resolve().parents[2] / "scenarios" / "traces" / name
    tr = _load_from(path, fmt)
    if fmt == "azure":
        raw = pd.read_csv(path)
        stamps = pd.to_datetime(raw["TIMESTAMP"])
        span = (stamps.iloc[-1] - stamps.iloc[0]).total_seconds()
        prompt, output = raw["ContextTokens"], raw["GeneratedTokens"]
    else:
        rows = [json.loads(x) for x in gzip.open(path, "rt") if x.strip()]
        span = (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1000
        prompt = pd.Series([r["input_length"] for r in rows])
        output = pd.Series([r["output_length"] for r in rows])
    assert len(tr.timestamp_s) == len(prompt)
    assert tr.timestamp_s[-1] == pytest.approx(span, abs=1e-6)
    assert tr.prompt_tokens.mean() == pytest.approx(prompt.mean())
    assert tr.output_tokens.mean() == pytest.approx(output.mean())


def _load_from(path, fmt):
    from sim.config.workload import TraceArrivalConfig
    from sim.workload.trace_formats import load_trace
    return load_trace(path, TraceArrivalConfig(type="trace", path=path.name, format=fmt))


def test_numbers_and_dates_past_any_trace_are_located(tmp_path):
    big = (b'{"timestamp": 0, "input_length": ' + b"9" * 400 + b', "output_length": 5}\n')
    with pytest.raises(WorkloadDataError, match=r"m\.jsonl:1: field 'input_length': not a "
                                                r"finite number"):
        _load(tmp_path, "m.jsonl", big, format="mooncake")
    dates = (b"TIMESTAMP,ContextTokens,GeneratedTokens\n1900-01-01 00:00:00,3,4\n"
             b"2262-04-11 00:00:00,3,4\n")
    with pytest.raises(WorkloadDataError, match=r"a\.csv:3: column 'TIMESTAMP': more than "
                                                r"10 years"):
        _load(tmp_path, "a.csv", dates, format="azure")
    with pytest.raises(WorkloadDataError, match=r"m\.jsonl:1: holds NUL bytes"):
        _load(tmp_path, "m.jsonl", '{"timestamp": 0}'.encode("utf-16"), format="mooncake")


def test_a_quoted_field_with_a_byte_that_is_not_utf8_is_located(tmp_path):
    """A quote sends the reader through the csv module for exact line numbers; a byte
    that is not UTF-8 then ended in an UnboundLocalError traceback."""
    (tmp_path / "trace.csv").write_bytes(HEADER.encode() + b'"0",1,1\n1,\xe9,2\n')
    with pytest.raises(WorkloadDataError, match=r"trace\.csv: cannot read as CSV: not UTF-8"):
        run(tmp_path, trace_workload())


def test_mooncake_hash_ids_are_read_checked_and_share_exactly_the_common_blocks(tmp_path):
    """Each row's hash_ids come through as its blocks' names; a run with prefix caching
    serves a later prompt's leading blocks that match an earlier one's from the cache."""
    import json
    import sim
    from tests.simfactories import make_pool, make_scenario
    rows = [{"timestamp": 0, "input_length": 1500, "output_length": 4, "hash_ids": [0, 1, 2]},
            {"timestamp": 5000, "input_length": 1400, "output_length": 4,
             "hash_ids": [0, 1, 7]},
            {"timestamp": 10000, "input_length": 900, "output_length": 4, "hash_ids": [9, 1]},
            {"timestamp": 15000, "input_length": 600, "output_length": 4}]
    text = "".join(json.dumps(r) + "\n" for r in rows).encode()
    tr = _load(tmp_path, "m.jsonl", text, format="mooncake")
    assert tr.block_ids.tolist() == [(0, 1, 2), (0, 1, 7), (9, 1), ()]
    scenario = make_scenario(
        stream={"arrival": {"type": "trace", "format": "mooncake",
                            "path": str(tmp_path / "m.jsonl")}},
        pool=make_pool(prefix_caching=True), duration=30.0)
    req = sim.run(scenario).requests.sort_values("arrival_s")
    assert req["cached_prompt_tokens"].tolist() == [0, 1024, 0, 0]
    for broken, message in [
            (b'{"timestamp": 20000, "input_length": 600, "output_length": 1, '
             b'"hash_ids": [1, "x"]}\n', r"m\.jsonl:5: field 'hash_ids': not a list of whole"),
            (b'{"timestamp": 20000, "input_length": 600, "output_length": 1, '
             b'"hash_ids": [-1]}\n', r"m\.jsonl:5: field 'hash_ids': not a list of whole"),
            (b'{"timestamp": 20000, "input_length": 600, "output_length": 1, '
             b'"hash_ids": [1, 2, 3]}\n', r"m\.jsonl:5: field 'hash_ids': 3 blocks of 512")]:
        with pytest.raises(WorkloadDataError, match=message):
            _load(tmp_path, "m.jsonl", text + broken, format="mooncake")


def test_a_gzip_bomb_is_refused_by_what_its_first_blocks_hold(tmp_path, monkeypatch):
    """A small gzip that inflates to a row and tens of millions of blank lines is refused
    from its first block (a 1.75 GiB one was walked line by line for minutes, or counted
    as rows and refused after 44 s); one of a row repeated until it is past 100 times its
    size is refused at that point, not inflated whole. Bytes inflated are counted, not
    time."""
    import gzip

    from sim.workload import trace
    inflated = []
    real = trace._Capped.readinto

    def counting(self, buffer):
        n = real(self, buffer)
        inflated.append(n)
        return n
    monkeypatch.setattr(trace._Capped, "readinto", counting)
    blank = tmp_path / "b.csv.gz"
    blank.write_bytes(gzip.compress(HEADER.encode() + b"0,1,1\n" + b"\n" * 60_000_000))
    with pytest.raises(WorkloadDataError, match="more than 1,000,000 blank lines"):
        trace.read_csv_columns(blank, ("timestamp",))
    assert sum(inflated) <= 2 * trace._SCAN_BLOCK_BYTES
    inflated.clear()
    rows = tmp_path / "r.csv.gz"
    rows.write_bytes(gzip.compress(HEADER.encode() + b"0,1,1\n" * 20_000_000, 9))
    cap = max(trace.MIN_GZIP_CAP_BYTES, trace.MAX_GZIP_RATIO * rows.stat().st_size)
    assert cap < 120_000_000                # the whole file would inflate to 120 MB
    with pytest.raises(WorkloadDataError, match="over 100 times its"):
        trace.read_csv_columns(rows, ("timestamp",))
    assert sum(inflated) <= cap + trace._SCAN_BLOCK_BYTES


def test_a_few_blank_lines_are_still_skipped(tmp_path):
    """Blank lines below the bound are rows of nothing, as before."""
    from sim.workload import trace
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "0,1,1\n\n \r\n2,3,4\n\n", encoding="utf-8")
    values, lines = trace.read_csv_columns(path, ("timestamp", "prompt_tokens"))
    assert values["prompt_tokens"].tolist() == [1, 3] and lines.tolist() == [2, 5]
