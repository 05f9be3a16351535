"""The README is a five-minute read that works: under 300 lines, every `fleetsim` command it
shows run as written (in a scratch folder, the repository's scenarios beside it), every
page it links present, and its quick start's printed figures those of a run now."""
from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from sim.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _commands() -> list[str]:
    """Each `fleetsim ...` command of the README's code blocks (a `$ ` prompt dropped, a
    trailing comment dropped; placeholders in capitals are not commands)."""
    found, blocks, block, plain = [], [], None, False
    for line in README.splitlines():
        if line.startswith("```"):
            if block is None:                       # a fence opens (plain: no language)
                block, plain = [], line == "```"
            else:
                if plain:
                    blocks.append("\n".join(block))
                block = None
        elif block is not None:
            block.append(line)
    for block in blocks:
        for line in block.splitlines():
            line = line.removeprefix("$ ").strip()
            if not line.startswith("fleetsim "):
                continue
            line = line.split("  #", 1)[0].strip()
            if re.search(r"\b[A-Z]{2,}\b", line):
                continue
            found.append(line)
    return found


def test_the_readme_is_short_and_links_its_pages():
    assert len(README.splitlines()) <= 300
    links = re.findall(r"\]\((docs/[\w\-]+\.md)(?:#[\w\-]+)?\)", README)
    assert len(set(links)) >= 8
    for link in links:
        assert (ROOT / link).is_file(), link


def test_every_docs_link_lands_on_a_page_and_a_heading():
    """Links between the pages (and back to the README) name files and headings that
    exist, as GitHub makes their anchors."""
    def anchors(path: Path) -> set[str]:
        heads = re.findall(r"(?m)^#{1,4} (.*)$", path.read_text(encoding="utf-8"))
        return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target, anchor in re.findall(r"\]\(([\w./\-]*\.md)?#([\w\-]+)\)", text):
            dest = (page.parent / target).resolve() if target else page
            assert dest.is_file(), (page.name, target)
            assert anchor in anchors(dest), (page.name, target, anchor)


@pytest.mark.parametrize("command", _commands())
def test_every_readme_command_runs_as_written(command, tmp_path, monkeypatch, capsys):
    for folder in ("scenarios", "profiles"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(command)[1:]
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 0, (command, err)


def test_the_quick_start_prints_what_the_readme_shows(tmp_path, monkeypatch, capsys):
    """The figures in the README's quick-start output are those of a run now."""
    block = README.split("$ fleetsim run scenarios/quickstart.yaml\n", 1)[1].split("```")[0]
    monkeypatch.chdir(tmp_path)
    shutil.copy(ROOT / "scenarios" / "quickstart.yaml", tmp_path / "quickstart.yaml")
    assert main(["run", "quickstart.yaml", "--no-report", "--out", "o"]) == 0
    out = capsys.readouterr().out
    shown = [line.strip() for line in block.splitlines() if line.strip() and
             line.strip() != "..." and not set(line.strip()) <= set("─ ")]
    printed = [" ".join(line.split()) for line in out.splitlines()]
    for line in shown:
        assert " ".join(line.split()) in printed, line


def test_every_relative_link_of_the_readme_and_docs_names_a_file_that_exists():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = [(page.name, target) for page in pages
               for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)",
                                        page.read_text(encoding="utf-8"))
               if not target.startswith(("http:", "https:", "mailto:"))
               and not (page.parent / target).exists()]
    assert not missing, missing
