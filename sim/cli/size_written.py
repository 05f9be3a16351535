"""What `fleetsim size` writes and says: the sized scenario (--write-scenario, checked
before any work), the chosen fleet, a trial's progress line and a verdict's words."""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from sim.config.inputs import shown
from sim.config.errors import ScenarioError


SCENARIO_SUFFIXES = (".yaml", ".yml")


def check_written(args: argparse.Namespace, inputs, out: Path | None) -> Path:
    """Before any work: the file --write-scenario names may be written (absent, or with
    --force a scenario an earlier --write-scenario wrote; never an input), a YAML file
    by its name. Its missing folders are made, as --out's are; inside --out's folder it
    is one of that folder's outputs (see :func:`fleet_scenario`)."""
    import os

    from sim.output.files.output_paths import check_file, output_error
    from sim.planning.write_back import is_written_scenario

    if Path(args.write_scenario).suffix.lower() not in SCENARIO_SUFFIXES:
        raise ScenarioError(f"--write-scenario {shown(args.write_scenario)}: a scenario is "
                            f"written as YAML: give a file name ending in .yaml or .yml",
                            field="--write-scenario")
    if out is not None and inside(out, Path(args.write_scenario)) == ".":
        raise ScenarioError("--write-scenario names the --out folder itself: give a file "
                            "in it or elsewhere", field="--write-scenario")
    path = check_file(Path(args.write_scenario), inputs=inputs,
                      kind="a scenario `fleetsim size --write-scenario` wrote",
                      is_kind=is_written_scenario)
    if os.path.lexists(path) and not args.force:
        raise output_error("the file exists; add --force to replace a scenario an earlier "
                           "--write-scenario wrote, or name another file", path)
    return path


def inside(folder: Path, path: Path) -> str | None:
    """``path`` relative to ``folder`` ('/'-separated; '.' for the folder itself), or None
    where it lies outside it."""
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(folder)).as_posix()
    except ValueError:
        return None


def fleet_scenario(chosen: Callable[[], tuple], path: Path | None, out: Path | None,
                   slos) -> tuple[dict[str, str], Callable[[], None]]:
    """--write-scenario: the fleet ``chosen()`` gives (see :mod:`sim.planning.write_back`;
    with lines saying what was chosen) as a scenario at ``path``. Returns the files to add to
    --out's folder (``path`` where it lies inside ``out``: the folder's marker lists it,
    so --force may replace the folder again) and what, called after the table is
    printed, writes it elsewhere and says where, and which folders its data files need
    allowed; no fleet (no answer) writes nothing and says so."""
    import sys

    from sim.output.files.atomic_write import write_file
    from sim.output.table import slo_value_text
    from sim.planning.write_back import scenario_text

    if path is None:
        return {}, lambda: None
    fleet, lines = chosen()
    if fleet is None:
        return {}, lambda: print(f"--write-scenario: nothing meets the SLOs; {shown(path)} "
                                 "not written", file=sys.stderr)
    lines = [*lines, "sized for " + ", ".join(f"{s.metric} {slo_value_text(s.metric, s.target)}"
                                             for s in slos) + f", seed {fleet.seed}"]
    text, outside = scenario_text(fleet, path, lines)
    in_out = inside(out, path) if out is not None else None

    def write() -> None:
        if in_out is None:
            write_file(path, text)
        print(f"wrote {shown(path)}: " + "; ".join(lines[:-1]))
        if outside:
            print("  its data files lie outside its folder: run it with "
                  + " ".join(f"--allow-path {shown(p)}" for p in outside))

    return ({in_out: text} if in_out is not None else {}), write


def chosen_fleet_lines(scenario, table):
    """The fleet ``table`` (size's) chose in ``scenario``, and a line a pool saying what."""
    from sim.planning.chosen import chosen_line, chosen_rows, sized_fleet
    return sized_fleet(scenario, table), [chosen_line(pool, row) for pool, row
                                          in chosen_rows(table).items()]


def write_sized(table, out: Path, args: argparse.Namespace, inputs, command: str,
                more: dict[str, str] | None = None) -> None:
    """size.csv and size.json of ``table`` in ``out`` (with ``more`` files: name to text),
    written as one folder fleetsim owns."""
    from sim.output.files.outputs import csv_safe, write_folder

    def write(folder: Path) -> list[Path]:
        csv_safe(table).to_csv(folder / "size.csv", index=False)
        table.to_json(folder / "size.json", orient="records", indent=2)
        written = [folder / "size.csv", folder / "size.json"]
        for name, text in (more or {}).items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
            written.append(folder / name)
        return written

    write_folder(write, out, force=args.force, inputs=inputs, command=command)


def trial_line(args: argparse.Namespace, label: str):
    """The progress line of a search (see :mod:`sim.cli.trial_progress`), to hold with
    ``with`` around the search (it gives None with --quiet)."""
    from contextlib import nullcontext

    from sim.cli.trial_progress import TrialLine
    return nullcontext() if args.quiet else TrialLine(label)


def verdict(failed: list[str], what: str) -> int:
    """Exit 1, with a line on stderr, when some pool has no answer within the SLOs."""
    if not failed:
        return 0
    import sys
    print(f"fleetsim size: {what} meets the SLOs for pool(s) {', '.join(failed)}",
          file=sys.stderr)
    return 1
