"""Writing a calibrated profile: through its declared schema
(:class:`sim.cost.profile_schema.CalibratedProfile`, which the simulator reads it by), as
YAML with short flow-style rows, numbers to four significant digits (no torch here:
profiles built from a kernel database use it too)."""
from __future__ import annotations

from pathlib import Path

import yaml

from calibrate.output import check_profile_files
from sim.cost.profile_schema import CalibratedProfile, parse_profile
from sim.output.files.atomic_write import write_file


def sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def exact_x(x: float):
    """A table's x as written: exact (distinct sizes must stay distinct)."""
    x = float(x)
    return int(x) if x.is_integer() else x


def table_rows(rows) -> list[list]:
    return [[exact_x(r[0])] + [sig(v) for v in r[1:]] for r in rows]


class ProfileDumper(yaml.SafeDumper):
    pass


def _flow_short_lists(dumper, data):
    flow = len(data) <= 4 and all(isinstance(v, (int, float)) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


ProfileDumper.add_representer(list, _flow_short_lists)


HEADER = ("# Calibrated step-time profile written by `fleetsim calibrate` (what the "
          "numbers mean: `note`).\n")


def profile_text(profile: dict | CalibratedProfile, where: str = "the profile") -> str:
    """The profile's file: checked against its schema (ValueError naming the field a
    writer got wrong), its fields in the schema's order, as YAML."""
    if not isinstance(profile, CalibratedProfile):
        profile = parse_profile(profile, where)
    return HEADER + yaml.dump(profile.layout(), Dumper=ProfileDumper, sort_keys=False,
                              width=96, allow_unicode=True)


def write_profile(profile: dict | CalibratedProfile, path: Path) -> None:
    text = profile_text(profile, f"calibrated profile {path}")
    check_profile_files(path)           # replaces only a profile fleetsim wrote
    write_file(path, text)     # never through a link; complete or not at all
