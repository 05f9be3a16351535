"""Fuzzing: a shipped scenario with one field changed to junk is either valid (it lints and
runs, exit 0) or refused with ``error: ...`` lines and exit 2; never a traceback, never a
hang. The junk is what attackers and careless users type: huge, negative, infinite and
non-numeric values, wrong types, control characters, very long strings, missing and
unknown keys."""
from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cli import main
from sim.config.yamlio import SafeLineLoader

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = sorted(p for p in (ROOT / "scenarios").glob("*.yaml") if "bench" not in p.stem)

JUNK = st.one_of(
    st.sampled_from([0, -1, 1, 2 ** 63, -(2 ** 63) - 1, 10 ** 30, 1e308, -1e308, 0.5, 1e-300,
                     float("inf"), float("-inf"), float("nan"), True, False, None, "", " ",
                     "1:30", "on", "yes", "0x10", "1e9/s", "-5s", "1ns", "1e30GB", "NaN",
                     "../../etc/passwd", "/etc/shadow", "=cmd|' /C calc'!A0", "\x00",
                     "a\nb", "\u202e", "x" * 5000, [], {}, [1, 2], {"type": "nope"},
                     {"type": "constant", "value": -1}]),
    st.integers(min_value=-(10 ** 20), max_value=10 ** 20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
)


def _leaves(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _leaves(value, path + (i,))
    yield path


def _set(node, path, value, delete: bool):
    *head, last = path
    for key in head:
        node = node[key]
    if delete and isinstance(node, dict):
        del node[last]
    else:
        node[last] = value


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_mutated_scenario_is_refused_cleanly_or_runs(tmp_path_factory, data):
    source = data.draw(st.sampled_from(SCENARIOS), label="scenario")
    scenario = yaml.load(source.read_text(encoding="utf-8"), Loader=SafeLineLoader)
    paths = [p for p in _leaves(scenario) if p]
    path = data.draw(st.sampled_from(paths), label="path")
    how = data.draw(st.sampled_from(["value", "delete", "unknown key"]), label="how")
    if how == "unknown key" and isinstance(scenario, dict):
        scenario[data.draw(st.text(min_size=1, max_size=12), label="key")] = 1
    else:
        _set(scenario, path, data.draw(JUNK, label="junk"), delete=how == "delete")
    folder = tmp_path_factory.mktemp("fuzz")
    target = folder / "s.yaml"
    try:
        text = yaml.safe_dump(scenario, allow_unicode=True, sort_keys=False)
    except yaml.YAMLError:
        return
    target.write_text(text, encoding="utf-8")
    _lint_and_run(target, folder, text)


def _lint_and_run(target: Path, folder: Path, text: str) -> None:
    """``lint`` then ``run`` (2 s): each exits 0 or refuses with ``error:`` lines, exit 2."""
    import contextlib
    import io
    for argv in (["lint", str(target)],
                 ["run", str(target), "--duration", "2s", "--out", str(folder / "out"),
                  "--quiet"]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code
        stderr = err.getvalue()
        assert code in (0, 2), (argv[0], code, stderr, text[:2000])
        assert "Traceback" not in stderr
        if code == 2:
            assert stderr.startswith("error: "), stderr
            break


# a trace's rows as attackers write them: blank and blank-looking lines, numbers in quotes,
# junk, huge and negative counts, NULs, long lines; compressed or not
ROW_JUNK = st.sampled_from([
    "", " ", "\r", "\t", "\x00", "x" * 70_000, "1e308", "-1", "nan", "inf", '"1_000"',
    "1_000", "0x10", "true", "null", "[]", "{}", '"', ",,,", "9" * 40])


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_hostile_trace_compressed_or_not_is_refused_cleanly_or_runs(tmp_path_factory, data):
    """A CSV or JSON-lines trace, gzip-compressed or not, with junk in its fields, lines
    of nothing, and up to a few million repeated blank lines."""
    import gzip
    import json
    fmt = data.draw(st.sampled_from(["csv", "mooncake"]), label="format")
    rows = data.draw(st.lists(st.tuples(st.floats(0, 10), ROW_JUNK, ROW_JUNK, st.booleans()),
                              min_size=0, max_size=6), label="rows")
    lines = []
    for t, prompt, output, junk in rows:
        p_val, o_val = (prompt, output) if junk else ("100", "20")
        if fmt == "csv":
            lines.append(f"{t},{p_val},{o_val}")
        else:
            fields = {"timestamp": 1000 * t}
            for name, value in (("input_length", p_val), ("output_length", o_val)):
                try:
                    fields[name] = json.loads(value)
                except ValueError:
                    fields[name] = value
            lines.append(json.dumps(fields))
    blanks = data.draw(st.sampled_from([0, 3, 1_500_000]), label="blank lines")
    body = ("timestamp,prompt_tokens,output_tokens\n" if fmt == "csv" else "") + \
        "\n".join(lines) + "\n" + "\n" * blanks
    gz = data.draw(st.booleans(), label="gzip")
    folder = tmp_path_factory.mktemp("fuzz-trace")
    name = f"t.{'csv' if fmt == 'csv' else 'jsonl'}{'.gz' if gz else ''}"
    raw = body.encode("utf-8", errors="surrogatepass")
    (folder / name).write_bytes(gzip.compress(raw, mtime=0) if gz else raw)
    text = f"""name: fuzz-trace
duration: 10s
workload:
  streams:
    s:
      team: t
      model: llama-3.1-8b
      arrival: {{type: trace, path: {name}{', format: mooncake' if fmt != 'csv' else ''}}}
pools:
  p: {{model: llama-3.1-8b, hardware: H100-SXM}}
"""
    target = folder / "s.yaml"
    target.write_text(text, encoding="utf-8")
    _lint_and_run(target, folder, text)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_hostile_closed_loop_is_refused_cleanly_or_runs(tmp_path_factory, data):
    """A closed-loop stream with junk or extreme clients, counts, pauses and keys (a key
    the gateway does not know makes every request a refusal)."""
    arrival = {"type": "closed"}
    for field, choices in (("concurrency", [1, 50, 20_000, 0, -1, "10", None]),
                           ("requests", [None, 1, 10_000_000, 0, "5"]),
                           ("think_time", [0, "0s", "10ms", -1, "1h", None])):
        value = data.draw(st.sampled_from(choices), label=field)
        if value is not None:
            arrival[field] = value
    key = data.draw(st.sampled_from([None, "good", "nope"]), label="api_key")
    stream = {"team": "t", "model": "llama-3.1-8b", "arrival": arrival,
              "prompt_tokens": {"type": "fixed", "value": 100},
              "output_tokens": {"type": "fixed", "value": 20}}
    if key is not None:
        stream["api_key"] = key
    scenario = {"name": "fuzz-closed", "duration": "1h", "workload": {"streams": {"s": stream}},
                "gateway": {"keys": {"good": {"team": "t"}}} if key else {},
                "pools": {"p": {"model": "llama-3.1-8b", "hardware": "H100-SXM"}}}
    folder = tmp_path_factory.mktemp("fuzz-closed")
    target = folder / "s.yaml"
    text = yaml.safe_dump(scenario, sort_keys=False)
    target.write_text(text, encoding="utf-8")
    _lint_and_run(target, folder, text)
