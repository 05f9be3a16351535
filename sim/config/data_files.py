"""The files a scenario reads besides itself (traces, length distributions, calibrated
profiles), named where the scenario names them and where they would be read from."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sim.config.inputs import scenario_files
from sim.config.scenario import Scenario


def length_files(loc: tuple, cfg) -> Iterator[tuple[tuple, str]]:
    """``(loc, path)`` of every length distribution read from a file under ``cfg``."""
    if getattr(cfg, "type", None) == "empirical" and getattr(cfg, "path", None) is not None:
        yield loc + ("path",), cfg.path
    for i, component in enumerate(getattr(cfg, "components", None) or ()):
        yield from length_files(loc + ("components", i, "dist"), component.dist)


def data_files(scenario: Scenario) -> list[Path]:
    """The files a scenario reads besides itself: traces, length distributions and
    calibrated profiles (those that can be found), where they would be read from."""
    files = scenario_files(scenario)
    found: list[str] = []
    for stream in scenario.workload.streams.values():
        if stream.arrival.type == "trace":
            found.append(stream.arrival.path)
        for key in ("prompt_tokens", "output_tokens"):
            found += [text for _loc, text in length_files((), getattr(stream, key))]
    paths = [files.locate(text) for text in found]
    from sim.cost.profile_file import resolve_profile_path
    for pool in scenario.pools.values():
        profile = pool.cost_model.profile_file()
        if profile:
            try:
                paths.append(resolve_profile_path(profile, files))
            except (ValueError, OSError):
                pass
    return paths
