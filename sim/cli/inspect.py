"""``fleetsim schema``, ``lint`` and ``profiles``: what a scenario may say, whether it
says it well, and what ships."""
from __future__ import annotations

import argparse
import json

from sim.config import profiles
from sim.cli.common import allowed_paths, add_allow_path


def _cmd_schema(args: argparse.Namespace) -> int:
    from sim.config.scenario import Scenario
    print(json.dumps(Scenario.model_json_schema(), indent=2))
    return 0


def _cmd_lint(args: argparse.Namespace) -> int:
    import sim
    from sim.api import prepare
    for path in args.scenarios:
        # everything up to the first simulated event: data files read, arrivals drawn
        prepare(sim.load_scenario(path, allow_paths=allowed_paths(args)))
        print(f"{path}: ok")
    return 0


def _cmd_profiles(args: argparse.Namespace) -> int:
    from sim.config.paths import data_dir
    print("hardware: " + ", ".join(profiles.hardware_names()))
    print("models:   " + ", ".join(profiles.model_names()))
    gpu = data_dir("profiles") / "calibrated" / "gpu"
    found = sorted(gpu.glob("*/*/*.yaml"))
    engines = sorted({p.parent.name for p in found})
    gpus = sorted({p.parent.parent.name for p in found})
    print(f"measured: {len(found)} GPU profiles from measured kernels ({', '.join(engines)} "
          f"on {', '.join(gpus)}), under profiles/calibrated/gpu/; a pool on a matching "
          f"model, GPU, TP and dtypes uses its profile by default")
    return 0


def add_inspect(sub) -> None:
    schema = sub.add_parser("schema", help="print the scenario JSON Schema (for editors)")
    schema.set_defaults(func=_cmd_schema)

    check = sub.add_parser("lint", help="validate scenario files and the data they read, without running them")
    check.add_argument("scenarios", nargs="+")
    add_allow_path(check)
    check.set_defaults(func=_cmd_lint)

    prof = sub.add_parser("profiles", help="list the shipped hardware and model profiles")
    prof.set_defaults(func=_cmd_profiles)
