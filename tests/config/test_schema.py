"""`fleetsim schema` describes what scenarios really say: every shipped scenario and
every full scenario in the README validates against it, units and shorthands included."""
from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
import yaml

import sim
from sim.cli import main
from sim.cli.inspect import scenario_schema

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [p for p in sorted((ROOT / "scenarios").rglob("*.yaml"))
           if isinstance(yaml.safe_load(p.read_text()), dict)
           and "pools" in yaml.safe_load(p.read_text())]


def _readme_scenarios() -> list[tuple[str, dict]]:
    """Every full scenario written in the README and the docs pages (but the recipes',
    which name the toys they register: tests/test_recipes.py checks those)."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if page.name == "recipes.md":
            continue
        blocks = re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
        for i, block in enumerate(blocks):
            data = yaml.safe_load(block)
            if isinstance(data, dict) and "pools" in data and "workload" in data:
                found.append((f"{page.name} block {i}", data))
    return found


@pytest.fixture(scope="module")
def validator():
    schema = scenario_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_there_is_something_to_check():
    assert len(SHIPPED) >= 20 and _readme_scenarios()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_scenario_validates_against_the_schema(validator, path):
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(
        yaml.safe_load(path.read_text(encoding="utf-8")))]
    assert errors == []


def test_every_scenario_in_the_readme_validates_against_the_schema(validator):
    for name, data in _readme_scenarios():
        errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(data)]
        assert errors == [], name


def test_the_schema_still_refuses_what_fleetsim_refuses(validator):
    """Not vacuous: a list where a duration goes, an unknown key, a length of text."""
    base = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    for change in ({"duration": [1]}, {"durration": "5min"},
                   {"workload": {"streams": {"s": {"model": "m", "output_tokens": "long",
                                                   "arrival": {"type": "poisson",
                                                               "rate": 1}}}}}):
        assert list(validator.iter_errors({**base, **change})), change


def test_a_scenario_may_name_its_schema(tmp_path, capsys):
    text = (ROOT / "scenarios" / "quickstart.yaml").read_text(encoding="utf-8")
    path = tmp_path / "s.yaml"
    path.write_text("$schema: ./fleetsim.schema.json\n" + text, encoding="utf-8")
    assert sim.load_scenario(path).name == "quickstart"
    path.write_text("$schema: 5\n" + text, encoding="utf-8")
    assert main(["lint", str(path)]) == 2
    assert "s.yaml:1: $schema: $schema names the schema" in capsys.readouterr().err


def test_schema_out_writes_a_file_and_replaces_only_its_own(tmp_path, capsys):
    out = tmp_path / "fleetsim.schema.json"
    assert main(["schema", "--out", str(out)]) == 0
    assert main(["schema", "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["title"] == "Scenario"
    mine = tmp_path / "mine.json"
    mine.write_text('{"title": "mine"}')
    assert main(["schema", "--out", str(mine)]) == 2
    assert mine.read_text() == '{"title": "mine"}'
