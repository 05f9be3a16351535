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
