"""The layers of ``sim/``, written down once and checked: every import of one of fleetsim's
modules by another (at the top of a module or inside a function; not under ``if
TYPE_CHECKING:``, which only names types) goes down the table or stays in its layer.

The table reads from the top (what a user calls) to the bottom (what everything
shares). A module belongs to the first layer one of whose patterns it matches; a
pattern is a module name, or a name ending in ``.*`` for a package and everything in
it. A module in no layer fails the test (a new package is placed on purpose). See
docs/layout.md, "Layers".
"""
from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("command line", ("sim.__main__", "sim.cli", "sim.cli.*")),
    ("workflows", ("sim.workflows",)),
    ("planning", ("sim.planning", "sim.planning.*")),
    ("the Python API", ("sim", "sim.api")),
    ("outputs: results, report, files", ("sim.output", "sim.output.*")),
    ("the simulation", ("sim.core", "sim.core.*")),
    ("recording", ("sim.recording", "sim.recording.*")),
    ("the scenario: composed, resolved, checked",
     ("sim.config.scenario", "sim.config.resolve", "sim.config.pool_fit",
      "sim.config.sizing_checks", "sim.config.gateway_checks", "sim.config.stream_routes",
      "sim.config.sanity", "sim.config.stages", "sim.config.import_model",
      "sim.config.overrides", "sim.config.data_files")),
    ("policies and models", ("sim.gateway", "sim.gateway.*", "sim.routers", "sim.routers.*",
                             "sim.schedulers", "sim.schedulers.*", "sim.autoscalers",
                             "sim.autoscalers.*", "sim.workload", "sim.workload.*",
                             "sim.cost", "sim.cost.*")),
    ("entities", ("sim.entities", "sim.entities.*")),
    ("configuration schema", ("sim.config", "sim.config.*", "sim.version")),
]


def layer_of(module: str) -> int | None:
    """The index of ``module``'s layer in :data:`LAYERS` (0 at the top), or None."""
    for index, (_, patterns) in enumerate(LAYERS):
        if any(module == p or fnmatch.fnmatchcase(module, p) for p in patterns):
            return index
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(tree: ast.AST, importer: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) of every fleetsim module ``tree`` imports, outside ``if
    TYPE_CHECKING:`` blocks; ``from a import b`` counts ``a.b`` where that is a module."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:       # relative: from the importer's package, up level - 1
                package = importer.split(".")
                if not any(k.startswith(importer + ".") for k in known):
                    package = package[:-1]          # a module's package is its parent
                package = package[:len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                     for a in node.names]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != importer:
                found.append((node.lineno, name))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def sim_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / "sim").rglob("*.py"))}


def violations(sources: dict[str, str]) -> list[str]:
    """Every import in ``sources`` (module name -> its source) that goes up the table,
    and every module in no layer."""
    known = set(sources)
    out = []
    for module, source in sorted(sources.items()):
        here = layer_of(module)
        if here is None:
            out.append(f"{module} is in no layer of tests/test_layers.py's LAYERS")
            continue
        for line, target in imports(ast.parse(source), module, known):
            there = layer_of(target)
            if there is not None and there < here:
                out.append(f"{module}:{line} imports {target}: '{LAYERS[here][0]}' sits "
                           f"below '{LAYERS[there][0]}'")
    return out


def test_every_import_goes_down_the_layers():
    sources = {m: p.read_text(encoding="utf-8") for m, p in sim_modules().items()}
    found = violations(sources)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("module, probe", [
    ("sim.cost.roofline", "from sim.core.simulation import Simulation\n"),
    ("sim.entities.request", "def f():\n    import sim.output.results\n"),
    ("sim.config.common", "from sim.schedulers import SCHEDULERS\n"),
    ("sim.cost.roofline", "from ..core import simulation\n"),
    ("sim.cost.roofline", "from ..output.results import Results\n"),
])
def test_an_import_up_the_layers_is_caught(module, probe):
    """A probe import that breaks the contract (a cost model reaching for the simulation,
    an entity importing the outputs inside a function, the schema importing a policy
    family, a relative import up the table) is reported with its module, line and the two
    layers."""
    sources = {m: p.read_text(encoding="utf-8") for m, p in sim_modules().items()}
    sources[module] = sources.get(module, "") + probe
    found = [v for v in violations(sources) if v.startswith(f"{module}:")]
    assert len(found) == 1 and "sits below" in found[0], found


def test_a_module_in_no_layer_is_caught():
    sources = {"sim.newthing": "x = 1\n"}
    assert violations(sources) == ["sim.newthing is in no layer of tests/test_layers.py's "
                                   "LAYERS"]


def test_type_checking_imports_name_types_only():
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
              "    from sim.core.simulation import Simulation\n")
    assert violations({"sim.cost.roofline": source, "sim.core.simulation": ""}) == []
