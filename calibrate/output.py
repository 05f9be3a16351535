"""Where calibrate/ writes: the same safety as the simulator's (:mod:`sim.output`): a file
is replaced only when fleetsim wrote it, never through a link, and appears whole or not at
all. A calibrated profile (with its plot and log) is checked before any timing starts."""
from __future__ import annotations

from pathlib import Path

import yaml

from sim.cost.profile_schema import PROFILE_KIND
from sim.output.files.atomic_write import write_file
from sim.output.files.output_paths import check_file


def is_profile(path: Path) -> bool:
    """True if ``path`` is a calibrated step-time profile (``kind:
    fleetsim-calibrated-step-time``), which `fleetsim calibrate` may replace."""
    try:
        with open(path, "rb") as fh:
            data = yaml.safe_load(fh.read(1 << 20))
    except (OSError, yaml.YAMLError, UnicodeError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("kind") == PROFILE_KIND


def check_profile_files(profile: Path, *siblings: str) -> None:
    """Before the work: the profile (and its sibling files with these suffixes, the
    plot and the log) may be written, replacing only what `calibrate` wrote."""
    check_file(profile, kind="a calibrated profile fleetsim wrote", is_kind=is_profile)
    for suffix in siblings:
        check_file(profile.with_suffix(suffix), kind="the plot or log of a calibrated profile",
                   is_kind=lambda _p: is_profile(profile))


def starts_with(path: Path, mark: str) -> bool:
    """True if the file at ``path`` begins with ``mark`` (the words a calibrate command
    begins each report it makes with)."""
    wanted = mark.encode("utf-8")
    try:
        with open(path, "rb") as fh:
            return fh.read(len(wanted)) == wanted
    except OSError:
        return False


def write_report(path: Path, text: str, mark: str, kind: str) -> Path:
    """Write ``text`` (which begins with ``mark``) to ``path``, complete or not at all,
    replacing only a file that begins with the same mark: one this command wrote."""
    if not text.startswith(mark):
        raise ValueError(f"{path.name}: the text must begin with its mark {mark!r}")
    check_file(path, kind=kind, is_kind=lambda p: starts_with(p, mark))
    write_file(path, text)
    return path
