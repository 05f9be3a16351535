"""docs/recipes.md works as written: each recipe's code blocks are taken from the page and
run (its Python registers a toy scheduler, router or trace format; its YAML is a GPU
profile or a scenario), the scenario runs, and a property shows the toy took effect. A
recipe that stops working, or a page edited into code that does not run, fails here."""
from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import yaml

import sim
from sim.cli import main
from sim.cli.inspect import scenario_schema
from sim.config import profiles
from sim.config.scenario import Scenario
from sim.config.trace_layouts import TRACE_FORMATS, unregister_trace_format
from sim.config.errors import ScenarioError
from sim.routers import ROUTERS
from sim.schedulers import SCHEDULERS

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "recipes.md").read_text(encoding="utf-8")


def blocks(section: str) -> dict[str, list[str]]:
    """The fenced code blocks of the page's ``## section``, by language, in order."""
    body = re.split(r"(?m)^## ", PAGE)
    text = next(part for part in body if part.startswith(section + "\n"))
    found: dict[str, list[str]] = {}
    for lang, code in re.findall(r"(?ms)^```(\w+)\n(.*?)^```$", text):
        found.setdefault(lang, []).append(code)
    return found


def run_python(section: str) -> dict:
    """Run the section's Python blocks in order as one module (the policy's module and the
    code that registers it; importable while it runs, as pydantic resolves its config's
    annotations there); the names they define."""
    module = types.ModuleType(f"recipe_{section.split()[-1]}")
    sys.modules[module.__name__] = module
    try:
        for code in blocks(section)["python"]:
            exec(compile(code, f"docs/recipes.md ({section})", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module.__dict__


def scenario_of(text: str) -> Scenario:
    return Scenario.model_validate(yaml.safe_load(text))


def completed(results):
    req = results.requests
    return req[req["status"].astype(str) == "completed"]


@pytest.fixture
def scheduler_recipe():
    names = run_python("A scheduler")
    try:
        yield names
    finally:
        SCHEDULERS.unregister(names["ShortestFirstConfig"])


def test_the_scheduler_recipe_serves_the_shortest_waiting_prompt_first(scheduler_recipe):
    """One request at a time: whenever the replica takes a request, no request waiting then
    has a shorter prompt; and some request is served before an earlier arrival (not FCFS)."""
    scenario = scenario_of(blocks("A scheduler")["yaml"][0])
    results = sim.run(scenario)
    req, done = results.requests, completed(results)
    assert len(done) > 40
    admitted = done.sort_values("admitted_s")
    assert results.summary["pools"]["main"]["max_running_seqs"] == 1     # one at a time
    start = req["admitted_s"].to_numpy()
    arrival = req["arrival_s"].to_numpy()
    prompt = req["prompt_tokens"].to_numpy()
    for t, p in zip(admitted["admitted_s"], admitted["prompt_tokens"]):
        waiting = (arrival <= t) & ~(start <= t)        # arrived, not taken yet (NaN: never)
        assert not (prompt[waiting] < p).any()
    order = admitted["arrival_s"].to_numpy()
    assert (np.diff(order) < 0).any()                   # served out of arrival order


def test_the_router_recipe_sends_every_request_to_the_highest_index():
    names = run_python("A router")
    try:
        scenario = scenario_of(blocks("A router")["yaml"][0])
        results = sim.run(scenario)
    finally:
        ROUTERS.unregister(names["LastReadyConfig"])
    done = completed(results)
    assert len(done) == len(results.requests) > 30
    assert results.summary["pools"]["main"]["replicas_max"] == 3
    assert set(done["replica"]) == {2}          # of replicas 0, 1 and 2, the last


@pytest.fixture
def shipped_with(tmp_path, monkeypatch):
    """The shipped profiles, with the recipe's GPU profile written beside them."""
    def add(text: str) -> None:
        folder = tmp_path / "profiles"
        (folder / "hardware").mkdir(parents=True)
        for path in (ROOT / "profiles" / "hardware").glob("*.yaml"):
            (folder / "hardware" / path.name).symlink_to(path)
        (folder / "models").symlink_to(ROOT / "profiles" / "models")
        (folder / "hardware" / "h100-half-bw.yaml").write_text(text, encoding="utf-8")
        monkeypatch.setattr(profiles, "data_dir", lambda name: tmp_path / name)
        profiles._load_dir.cache_clear()
        profiles._parse.cache_clear()
    yield add
    profiles._load_dir.cache_clear()
    profiles._parse.cache_clear()


def _tpot_s(scenario: Scenario) -> float:
    return float(completed(sim.run(scenario))["tpot_s"].median())


def test_the_gpu_recipe_of_half_the_bandwidth_decodes_slower(shipped_with):
    """The profile file of the recipe, among the shipped ones, is found by name; so is the
    same profile given inline; decode, bound by memory bandwidth, is slower on either than
    on the H100 whose bandwidth it halves (both on the roofline)."""
    profile, scenario_text = blocks("A GPU")["yaml"]
    shipped_with(profile)
    assert "H100-HALF-BW" in profiles.hardware_names()
    half = scenario_of(scenario_text)
    full = sim.with_overrides(half, {"pools.main.hardware": "H100-SXM"})
    inline_data = yaml.safe_load(scenario_text)
    spec = yaml.safe_load(profile)
    inline_data["hardware"] = {spec["name"]: spec}
    inline = scenario_of(yaml.safe_dump(inline_data))
    slow, fast, inline_slow = _tpot_s(half), _tpot_s(full), _tpot_s(inline)
    assert slow == inline_slow
    assert 1.5 * fast < slow < 2.0 * fast


@pytest.fixture
def trace_recipe():
    run_python("A trace format")
    try:
        yield
    finally:
        unregister_trace_format("gateway_log")


def test_the_trace_format_recipe_reads_its_columns_and_milliseconds(trace_recipe, tmp_path):
    code = blocks("A trace format")
    (tmp_path / "requests.csv").write_text(code["csv"][0], encoding="utf-8")
    (tmp_path / "scenario.yaml").write_text(code["yaml"][0], encoding="utf-8")
    results = sim.run(sim.load_scenario(tmp_path / "scenario.yaml"))
    req = results.requests.sort_values("arrival_s")
    assert req["arrival_s"].tolist() == [0.0, 0.25, 1.5]
    assert req["prompt_tokens"].tolist() == [120, 300, 80]
    assert (req["status"].astype(str) == "completed").all()


def test_an_unknown_trace_format_is_refused_with_the_registered_ones(trace_recipe, tmp_path,
                                                                     capsys):
    """The accepted names are the registry's: a registered format is among the choices an
    unknown one is refused with, and is refused itself once taken out."""
    code = blocks("A trace format")
    (tmp_path / "requests.csv").write_text(code["csv"][0], encoding="utf-8")
    path = tmp_path / "scenario.yaml"
    path.write_text(code["yaml"][0].replace("gateway_log", "gateway-log"), encoding="utf-8")
    with pytest.raises(ScenarioError) as err:
        sim.load_scenario(path)
    assert str(err.value).endswith(
        "scenario.yaml:8: workload.streams.replay.arrival.format: Input should be 'csv', "
        "'azure', 'mooncake' or 'gateway_log' (got 'gateway-log') (did you mean "
        "'gateway_log'?)")
    assert main(["lint", str(path)]) == 2
    assert "did you mean 'gateway_log'?" in capsys.readouterr().err
    schema = Scenario.model_json_schema()["$defs"]["TraceArrivalConfig"]
    assert schema["properties"]["format"]["enum"] == ["csv", "azure", "mooncake",
                                                      "gateway_log"]
    unregister_trace_format("gateway_log")
    try:
        path.write_text(code["yaml"][0], encoding="utf-8")
        with pytest.raises(ScenarioError, match="'csv', 'azure' or 'mooncake'"):
            sim.load_scenario(path)
    finally:
        run_python("A trace format")
    assert "gateway_log" in TRACE_FORMATS


@pytest.mark.parametrize("section", ["A scheduler", "A router", "A GPU", "A trace format"])
def test_each_recipe_scenario_validates_against_fleetsim_schema_once_registered(section):
    """`fleetsim schema` lists what a recipe registers: its scenario validates against the
    schema printed after the registration (and for a toy type or format, not before)."""
    scenario = yaml.safe_load(blocks(section)["yaml"][-1])

    def errors() -> list[str]:
        return [e.message for e in
                jsonschema.Draft202012Validator(scenario_schema()).iter_errors(scenario)]
    if "python" not in blocks(section):
        assert errors() == []               # a GPU is a name: any profile's
        return
    assert errors() != []
    names = run_python(section)
    try:
        assert errors() == []
    finally:
        for family, config in ((SCHEDULERS, "ShortestFirstConfig"),
                               (ROUTERS, "LastReadyConfig")):
            if config in names:
                family.unregister(names[config])
        TRACE_FORMATS.pop("gateway_log", None)


def test_a_mistake_in_a_new_gpu_profile_is_located_by_lint(shipped_with, tmp_path, capsys):
    """The recipe's profile without its bf16 figure: `fleetsim lint` of a scenario that
    names it says which file, line and field, and exits 2 (no traceback)."""
    profile, scenario_text = blocks("A GPU")["yaml"]
    broken = "".join(line for line in profile.splitlines(keepends=True)
                     if not line.lstrip().startswith("bf16:"))
    shipped_with(broken)
    path = tmp_path / "scenario.yaml"
    path.write_text(scenario_text, encoding="utf-8")
    assert main(["lint", str(path)]) == 2
    err = capsys.readouterr().err
    assert "h100-half-bw.yaml:5: flops: must give at least a 'bf16' figure" in err
    assert "Traceback" not in err
