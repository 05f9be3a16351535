"""Safe YAML loading with line numbers, and readable scenario errors."""
from __future__ import annotations

import pathlib
import pickle
import textwrap
from typing import Annotated, Literal, Optional, Union

import pydantic
import pytest
from pydantic import Field

from sim.config.common import PositiveInt, Seconds, StrictModel
from sim.config.errors import (
    Problem,
    ScenarioError,
    dotted_path,
    format_cli_error,
)
from sim.config.validation_errors import from_validation_error
from sim.config.yamlio import LineMap, load_model, load_yaml


class Single(StrictModel):
    type: Literal["single"]


class Static(StrictModel):
    type: Literal["static"]
    slots: PositiveInt = 4


class Continuous(StrictModel):
    type: Literal["continuous"]
    max_batch: PositiveInt = 8


Scheduler = Annotated[Union[Single, Static, Continuous], Field(discriminator="type")]


class Pool(StrictModel):
    model: str
    replicas: PositiveInt
    warmup: Seconds = 0.0
    scheduler: Scheduler


class Phase(StrictModel):
    duration: Seconds
    rate: float = 1.0


class Root(StrictModel):
    pools: dict[str, Pool]
    phases: list[Phase] = []
    notes: Optional[str] = None


def write(tmp_path: pathlib.Path, text: str, name: str = "s.yaml") -> pathlib.Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def validate(path: pathlib.Path, model: type[pydantic.BaseModel] = Root) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_model(path, model)
    return info.value


GOOD = """
pools:            # 1
  main:           # 2
    model: llama  # 3
    replicas: 2   # 4
    scheduler:    # 5
      type: static
      slots: 3    # 7
phases:           # 8
  - duration: 10s # 9
    rate: 2       # 10
  - {duration: 1min, rate: 5}
"""


def test_lines_for_nested_keys_and_list_items(tmp_path):
    data, lines = load_yaml(write(tmp_path, GOOD))
    assert data["pools"]["main"]["scheduler"] == {"type": "static", "slots": 3}
    assert lines.get(("pools",)) == 1
    assert lines.get(("pools", "main")) == 2
    assert lines.get(("pools", "main", "replicas")) == 4
    assert lines.get(("pools", "main", "scheduler", "slots")) == 7
    assert lines.get(("phases", 0)) == 9
    assert lines.get(("phases", 0, "rate")) == 10
    assert lines.get(("phases", 1)) == 11
    assert lines.get(("phases", 1, "rate")) == 11
    assert lines.get(("nope",)) is None


def test_line_for_skips_pydantic_internal_parts(tmp_path):
    _, lines = load_yaml(write(tmp_path, GOOD))
    loc = ("pools", "main", "scheduler", "static", "function-after[f, int]", "slots")
    assert lines.line_for(loc) == 7
    # a missing key falls back to its parent
    assert lines.line_for(("pools", "main", "scheduler", "static", "max_batch")) == 5
    assert lines.line_for(("phases", 1, "duration", "extra")) == 11
    assert lines.line_for(()) == 1


def test_valid_scenario_validates(tmp_path):
    root = load_model(write(tmp_path, GOOD), Root)
    assert root.pools["main"].scheduler == Static(type="static", slots=3)
    assert root.phases[1].duration == 60.0


def test_unknown_key_names_file_line_field_valid_keys_and_suggestion(tmp_path):
    path = write(tmp_path, """
        pools:
          main:
            model: llama
            replicsa: 2
            scheduler: {type: single}
        """)
    err = validate(path)
    assert len(err.problems) == 2  # the unknown key, and replicas is then missing
    unknown = next(p for p in err.problems if "unknown key" in p.message)
    assert unknown.file == str(path)
    assert unknown.line == 4
    assert unknown.field == "pools.main.replicsa"
    assert "valid keys: model, replicas, warmup, scheduler" in unknown.message
    assert "did you mean 'replicas'?" in unknown.message
    assert f"{path}:4: pools.main.replicsa: unknown key 'replicsa'" in str(err)
    missing = next(p for p in err.problems if "missing" in p.message)
    assert missing.message == "missing required key 'replicas'"
    assert missing.field == "pools.main.replicas" and missing.line == 2


def test_unknown_key_inside_union_member_lists_that_members_keys(tmp_path):
    path = write(tmp_path, """
        pools:
          main:
            model: m
            replicas: 1
            scheduler:
              type: continuous
              max_bach: 16
        """)
    err = validate(path)
    assert err.line == 7
    assert err.field == "pools.main.scheduler.max_bach"
    assert "valid keys: type, max_batch" in err.message
    assert "did you mean 'max_batch'?" in err.message


def test_unknown_top_level_key_and_list_item_key(tmp_path):
    path = write(tmp_path, """
        pools: {}
        phases:
          - duration: 1s
          - duraton: 2s
        note: hi
        """)
    err = validate(path)
    by_field = {p.field: p for p in err.problems}
    assert by_field["phases[1].duraton"].line == 4
    assert "did you mean 'duration'?" in by_field["phases[1].duraton"].message
    assert by_field["phases[1].duration"].message == "missing required key 'duration'"
    assert by_field["note"].line == 5
    assert "valid keys: pools, phases, notes" in by_field["note"].message
    assert "did you mean 'notes'?" in by_field["note"].message


def test_discriminator_typo_lists_choices_and_suggests(tmp_path):
    path = write(tmp_path, """
        pools:
          main:
            model: m
            replicas: 1
            scheduler:
              type: continous
        """)
    err = validate(path)
    assert len(err.problems) == 1
    assert err.line == 6
    assert err.field == "pools.main.scheduler.type"
    assert "'continous'" in err.message
    assert "expected one of 'single', 'static', 'continuous'" in err.message
    assert "did you mean 'continuous'?" in err.message


class Track(StrictModel):
    type: Literal["target"]
    target: PositiveInt
    most: PositiveInt


class Hold(StrictModel):
    type: Literal["hold"]


class Scaled(StrictModel):
    scaler: Optional[Annotated[Union[Track, Hold], Field(discriminator="type")]] = None


SCALED = """
scaler:        # 1
  type: target
  target: 0    # 3
  most: 0      # 4
  targett: 1   # 5
"""


def test_union_tag_that_is_also_a_key_is_read_as_the_tag(tmp_path):
    """pydantic's loc ``scaler.target.most`` holds the tag 'target'; the input also has a
    ``target:`` key, which must not swallow the error in ``most`` (with or without data)."""
    path = write(tmp_path, SCALED)
    data, lines = load_yaml(path)
    with pytest.raises(pydantic.ValidationError) as info:
        Scaled.model_validate(data)
    for given in (data, None):
        err = from_validation_error(info.value, file="s.yaml", line_map=lines,
                                    root_model=Scaled, data=given)
        located = {(p.field, p.line) for p in err.problems}
        assert located == {("scaler.target", 3), ("scaler.most", 4), ("scaler.targett", 5)}
    assert "valid keys: type, target, most" in str(validate(path, Scaled))


def test_missing_discriminator_lists_choices(tmp_path):
    path = write(tmp_path, """
        pools:
          main: {model: m, replicas: 1, scheduler: {slots: 2}}
        """)
    err = validate(path)
    assert err.field == "pools.main.scheduler.type"
    assert err.line == 2
    assert "missing required key 'type'" in err.message
    assert "'single', 'static', 'continuous'" in err.message


def test_wrong_unit_names_field_and_line(tmp_path):
    path = write(tmp_path, """
        pools:
          main:
            model: m
            replicas: 1
            warmup: 2 parsecs
            scheduler: {type: single}
        """)
    err = validate(path)
    assert (err.line, err.field) == (5, "pools.main.warmup")
    assert "'2 parsecs'" in err.message and "'ms'" in err.message
    assert not err.message.startswith("Value error")


def test_negative_numbers(tmp_path):
    path = write(tmp_path, """
        pools:
          main:
            model: m
            replicas: -3
            warmup: -1s
            scheduler: {type: static, slots: 0}
        """)
    err = validate(path)
    got = {p.field: (p.line, p.message) for p in err.problems}
    assert got["pools.main.replicas"] == (4, "Input should be greater than 0 (got -3)")
    assert got["pools.main.warmup"][0] == 5
    assert "must be at least 0" in got["pools.main.warmup"][1]
    assert "'-1s'" in got["pools.main.warmup"][1]
    assert got["pools.main.scheduler.slots"] == (6, "Input should be greater than 0 (got 0)")


def test_several_errors_all_reported_sorted_by_line(tmp_path):
    path = write(tmp_path, """
        pools:
          a: {model: m, replicas: 0, scheduler: {type: single}}
          b: {model: m, replicas: 1, scheduler: {type: singel}}
          c: {model: [1, 2], replicas: x, scheduler: {type: single}}
        phases:
          - {duration: soon}
        """)
    err = validate(path)
    assert [p.line for p in err.problems] == [2, 3, 4, 4, 6]
    text = str(err)
    assert len(text.splitlines()) == 5
    assert "pools.c.model: Input should be a valid string (got [1, 2])" in text
    assert "pools.c.replicas" in text and "(got 'x')" in text
    assert "phases[0].duration" in text
    cli = format_cli_error(err)
    assert all(line.startswith("error: ") for line in cli.splitlines())


def test_long_problem_lists_are_truncated():
    problems = [Problem(f"bad {i}", file="f.yaml", line=i) for i in range(1, 26)]
    text = str(ScenarioError.many(problems))
    lines = text.splitlines()
    assert len(lines) == 21
    assert lines[0] == "f.yaml:1: bad 1"
    assert lines[-1] == "... and 5 more"


def test_duplicate_key_is_refused_naming_both_lines(tmp_path):
    path = write(tmp_path, """
        pools:
          main:
            model: m
            replicas: 1
            model: n
        """)
    with pytest.raises(ScenarioError) as info:
        load_yaml(path)
    err = info.value
    assert err.line == 5 and err.field == "pools.main.model"
    assert "duplicate key 'model'" in err.message
    assert "line 3" in err.message and "line 5" in err.message


def test_duplicate_in_flow_mapping_and_merge_override_is_allowed(tmp_path):
    with pytest.raises(ScenarioError, match="duplicate key 'a'"):
        load_yaml(write(tmp_path, "x: {a: 1, a: 2}\n", "flow.yaml"))
    data, _ = load_yaml(write(tmp_path, """
        base: &b {a: 1, b: 2}
        child:
          <<: *b
          a: 3
        """, "merge.yaml"))
    assert data["child"] == {"a": 3, "b": 2}


def test_yaml_syntax_error_reports_line(tmp_path):
    path = write(tmp_path, """
        pools:
          main:
            model: m
            replicas: [1, 2
            other: 3
        """)
    with pytest.raises(ScenarioError) as info:
        load_yaml(path)
    err = info.value
    assert err.file == str(path)
    assert err.message.startswith("invalid YAML")
    assert err.line in (5, 6)  # the unclosed flow sequence is noticed on the next line
    assert str(err).startswith(f"{path}:{err.line}:")

    bad_indent = write(tmp_path, "a: 1\n b: 2\nc: 3\n", "indent.yaml")
    with pytest.raises(ScenarioError) as info:
        load_yaml(bad_indent)
    assert info.value.line == 2


def test_anchors_aliases_and_merge_keys_load(tmp_path):
    path = write(tmp_path, """
        common: &common
          model: llama
          replicas: 2
          scheduler: &sched {type: static, slots: 2}
        pools:
          a:
            <<: *common
          b:
            <<: *common
            replicas: 5
            scheduler: *sched
        """)
    data, lines = load_yaml(path)
    assert data["pools"]["a"] == {"model": "llama", "replicas": 2,
                                  "scheduler": {"type": "static", "slots": 2}}
    assert data["pools"]["b"]["replicas"] == 5
    assert lines.get(("pools", "b", "replicas")) == 10
    assert lines.get(("pools", "a", "model")) is not None
    assert lines.get(("pools", "b", "scheduler", "slots")) == 4


def test_python_tags_are_refused_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    path = write(tmp_path, f"""
        pools: !!python/object/apply:os.system ["touch {marker}"]
        """)
    with pytest.raises(ScenarioError) as info:
        load_yaml(path)
    assert not marker.exists()
    assert info.value.line == 1
    assert "python/object/apply:os.system" in info.value.message

    with pytest.raises(ScenarioError, match="python/object"):
        load_yaml(write(tmp_path, "x: !!python/object:os.Foo {}\n", "obj.yaml"))


@pytest.mark.parametrize("text, expected", [
    ("", "empty"),
    ("# only a comment\n", "empty"),
    ("~\n", "empty"),
    ("- a\n- b\n", "mapping"),
    ("just a string\n", "mapping"),
])
def test_empty_or_non_mapping_top_level(tmp_path, text, expected):
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=expected) as info:
        load_yaml(path)
    assert info.value.file == str(path)


def test_unreadable_and_multi_document_files(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read file"):
        load_yaml(tmp_path / "missing.yaml")
    with pytest.raises(ScenarioError, match="single document"):
        load_yaml(write(tmp_path, "a: 1\n---\nb: 2\n", "multi.yaml"))
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"a: 1\nb: \xff\xfe\n")
    with pytest.raises(ScenarioError, match="UTF-8") as info:
        load_yaml(bad)
    assert info.value.line == 2


def test_exponent_numbers_read_as_floats(tmp_path):
    data, _ = load_yaml(write(tmp_path, "a: 1e6\nb: 2.5e-3\nc: 1_000\nd: 1e\n"))
    assert data == {"a": 1e6, "b": 2.5e-3, "c": 1000, "d": "1e"}


def test_from_validation_error_without_data_uses_line_map(tmp_path):
    path = write(tmp_path, """
        pools:
          main: {model: m, replicas: 0, scheduler: {type: single, extra: 1}}
        """)
    data, lines = load_yaml(path)
    with pytest.raises(pydantic.ValidationError) as info:
        Root.model_validate(data)
    err = from_validation_error(info.value, file="s.yaml", line_map=lines, root_model=Root)
    fields = {p.field for p in err.problems}
    assert fields == {"pools.main.replicas", "pools.main.scheduler.extra"}
    assert all(p.line == 2 for p in err.problems)


def test_error_formatting_helpers():
    err = ScenarioError("boom", file="x.yaml", line=3, field="a.b[0]")
    assert str(err) == "x.yaml:3: a.b[0]: boom"
    assert format_cli_error(err) == "error: x.yaml:3: a.b[0]: boom"
    assert ScenarioError.exit_code == 2
    assert str(ScenarioError("no place")) == "no place"
    assert str(ScenarioError("col", file="f", line=2, column=5)) == "f:2:5: col"
    assert format_cli_error(FileNotFoundError(2, "No such file or directory", "a.yaml")) \
        == "error: a.yaml: No such file or directory"
    assert format_cli_error(RuntimeError()) == "error: RuntimeError"
    assert dotted_path(("pools", "main", "phases", 0, "rate")) == "pools.main.phases[0].rate"
    copy = pickle.loads(pickle.dumps(ScenarioError.many(
        [Problem("a", line=1), Problem("b", line=2)])))
    assert [p.message for p in copy.problems] == ["a", "b"]
    assert isinstance(LineMap().line_for(("x",)), type(None))


def test_control_characters_and_alias_bombs_are_refused(tmp_path):
    ctrl = tmp_path / "ctrl.yaml"
    ctrl.write_text("a: 1\nb: \x01\n")
    with pytest.raises(ScenarioError, match="#x0001") as info:
        load_yaml(ctrl)
    assert info.value.line == 2
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8)]
    with pytest.raises(ScenarioError, match="alias"):
        load_yaml(write(tmp_path, "\n".join(lines) + "\n", "bomb.yaml"))
