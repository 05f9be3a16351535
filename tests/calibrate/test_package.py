"""calibrate/ as a package of tools: one command surface, and imports without cycles."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from calibrate.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]


def module_names(package: Path) -> dict[str, Path]:
    """Every module under ``package`` by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, anywhere in its text (at the
    top or inside a function: a cycle through a deferred import is a cycle all the same).
    ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``."""
    modules = module_names(package)
    top = package.name
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:                     # relative: from the module's package
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    here = here[:len(here) - node.level + 1]
                    base = ".".join(here + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            for target in targets:
                if target.split(".")[0] != top:
                    continue
                while target not in modules:        # a name inside a module: the module
                    target = target.rsplit(".", 1)[0]
                if target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as the modules along it (first repeated last), or None."""
    state: dict[str, int] = {}          # 1: on the path being walked, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state:
            found = walk(start)
            if found:
                return found
    return None


def test_calibrate_imports_no_module_that_imports_it_back():
    """No import cycle among calibrate's modules, deferred imports included."""
    cycle = find_cycle(import_graph(ROOT / "calibrate"))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_finds_a_cycle_through_a_deferred_import(tmp_path):
    """The check itself: two modules of a package, one importing the other at the top and
    the other importing it back inside a function, are a cycle."""
    pkg = tmp_path / "probe"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from probe.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from probe import a\n    return a\n")
    assert find_cycle(import_graph(pkg)) == ["probe.a", "probe.sub.b", "probe.a"]
    (pkg / "sub" / "b.py").write_text("def f():\n    return 1\n")
    assert find_cycle(import_graph(pkg)) is None


def test_python_m_calibrate_help_lists_every_command_without_the_simulator_or_torch():
    """``python -m calibrate --help`` names each command, and building the command line
    imports neither the simulator (validate-gpu --before-checkout imports an earlier one)
    nor torch."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "calibrate", "--help"], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for name in COMMANDS:
        assert f"\n    {name}" in proc.stdout, name
    assert set(COMMANDS) >= {"profile", "validate", "validate-gpu", "gpu-profiles",
                             "roofline-fit", "vllm-host", "vllm-ship", "tokenise-time",
                             "operating-point"}
    probe = ("import sys; from calibrate.cli import build_parser; build_parser(); "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'sim', 'torch'}))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_fleetsim_calibrate_and_validate_are_calibrates_commands():
    """fleetsim mounts calibrate's ``profile`` and ``validate``: the same handlers."""
    from sim.cli import build_parser
    fleetsim = build_parser()._subparsers._group_actions[0].choices
    from calibrate.cli import build_parser as calibrate_parser
    ours = calibrate_parser()._subparsers._group_actions[0].choices
    assert fleetsim["calibrate"].get_default("func") is ours["profile"].get_default("func")
    assert fleetsim["validate"].get_default("func") is ours["validate"].get_default("func")


def test_calibrate_is_one_subpackage_per_tool_of_small_modules():
    """A handful of modules at calibrate's top (the command line, its shared arguments, the
    output helper), the rest in one subpackage per tool, none over 450 lines."""
    top = {p.name for p in (ROOT / "calibrate").glob("*.py")}
    assert top == {"__init__.py", "__main__.py", "arguments.py", "cli.py", "output.py"}
    tools = {p.name for p in (ROOT / "calibrate").iterdir()
             if p.is_dir() and (p / "__init__.py").is_file()}
    assert tools == {"fitting", "microbench", "kernels", "engines", "validate"}
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "calibrate").rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 450}
    assert not long, long
