"""`size --write-scenario FILE`: the fleet `size` chose, as a scenario `fleetsim run`
reproduces.

The file is the scenario sized (its ``--set`` overrides included, a ``--window``'s or
``--peak``'s shortened run not: the whole run), with each sized pool set exactly as its
trials ran it: the option's hardware, TP, pipeline stages, weight and KV cache
precisions, the replica count, and the fixed count that replaced its autoscaler (or the
autoscaler's target and bounds `--autoscaled` chose). Every other field is written as
fleetsim holds it, so nothing is left to a default that might differ.

The data files a scenario names (traces, length files, calibrated profiles) are relative
to the scenario's folder; written elsewhere, each relative path is rewritten relative to
the new file's folder (a shipped profile keeps its name), and a file outside that folder
needs ``--allow-path`` to be read, which the command says.
"""
from __future__ import annotations

import os
from pathlib import Path

from sim.config.inputs import inside, scenario_files, shipped_roots
from sim.config.scenario import Scenario
from sim.config.yamlio import dump_data

# the first line of every file --write-scenario writes: the mark of a file --force may
# replace (a scenario written by hand is the user's own)
HEADER = "# fleetsim size --write-scenario:"


def is_written_scenario(path: Path) -> bool:
    """True if ``path`` starts as a scenario ``size --write-scenario`` wrote."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(HEADER)) == HEADER.encode()
    except OSError:
        return False


def _data_paths(data: dict) -> list[tuple[dict, str, str]]:
    """(the mapping holding it, its key, how it is found) of every data file a dumped
    scenario names: ``folder`` (relative to the scenario's folder) or ``profile`` (a
    calibrated profile: the scenario's folder, then the shipped profiles/)."""
    found = []

    def lengths(dist) -> None:
        if not isinstance(dist, dict):
            return
        if dist.get("type") == "empirical" and isinstance(dist.get("path"), str):
            found.append((dist, "path", "folder"))
        for component in dist.get("components") or ():
            lengths(component.get("dist"))

    for stream in (data.get("workload", {}).get("streams") or {}).values():
        arrival = stream.get("arrival") or {}
        if arrival.get("type") == "trace" and isinstance(arrival.get("path"), str):
            found.append((arrival, "path", "folder"))
        for key in ("prompt_tokens", "output_tokens"):
            lengths(stream.get(key))
    for pool in (data.get("pools") or {}).values():
        cost = pool.get("cost_model") or {}
        if cost.get("type") == "calibrated" and isinstance(cost.get("profile"), str):
            found.append((cost, "profile", "profile"))
    return found


def _under(path: Path, roots) -> bool:
    path = path.resolve()
    return any(inside(path, root) for root in roots)


def scenario_text(fleet: Scenario, target: Path, lines: list[str]) -> tuple[str, list[Path]]:
    """The text of ``fleet`` written at ``target`` (``lines``: the comment lines after the
    header, saying what was chosen), and the folders of data files it names outside
    ``target``'s folder and the shipped data (``--allow-path`` each to run it)."""
    from sim.cost.profile_file import resolve_profile_path

    data = fleet.model_dump(mode="json")
    files = scenario_files(fleet)
    folder = target.parent.resolve()
    shipped = [Path(r).resolve() for r in shipped_roots()]
    outside: list[Path] = []
    for holder, key, how in _data_paths(data):
        text = holder[key]
        if os.path.isabs(os.path.expanduser(text)):
            where = Path(os.path.expanduser(text))
        elif how == "profile":
            try:
                where = resolve_profile_path(text, files)
            except (ValueError, OSError):
                continue                # (loading checked it: not met here)
            if _under(where, shipped) and not (files.folder / text).exists():
                continue                # a shipped profile, found by its name anywhere
        else:
            where = files.locate(text)
        if not os.path.isabs(os.path.expanduser(text)):
            holder[key] = Path(os.path.relpath(where.resolve(), folder)).as_posix()
        if not _under(where, [folder, *shipped]) and where.resolve().parent not in outside:
            outside.append(where.resolve().parent)
    body = dump_data(data)
    head = [HEADER + " the fleet `fleetsim size` chose; `fleetsim run` this file to "
            "reproduce its verdict", *(f"# {line}" for line in lines)]
    return "\n".join(head) + "\n" + body, outside
