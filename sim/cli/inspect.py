"""``fleetsim schema``, ``lint`` and ``profiles``: what a scenario may say, whether it
says it well, and what ships."""
from __future__ import annotations

import argparse
import json

from sim.config.inputs import shown
from sim.config import profiles
from sim.cli.common import allowed_paths, add_allow_path, path_arg


DRAFT = "https://json-schema.org/draft/2020-12/schema"


def scenario_schema() -> dict:
    """The JSON Schema of scenario files: every unit and shorthand a field takes (``2h``,
    ``8/s``, ``output_tokens: 100``), and a ``$schema`` key a file may name it by."""
    from sim.config.scenario import Scenario
    schema = {"$schema": DRAFT, **Scenario.model_json_schema()}
    schema["properties"] = {"$schema": {
        "type": "string", "description": "This schema's location, for editors (ignored "
                                         "by fleetsim)"}, **schema["properties"]}
    models = schema["properties"]["models"]       # a profile, or a config.json to read
    models["additionalProperties"] = {"anyOf": [models["additionalProperties"], {
        "type": "object", "additionalProperties": False, "required": ["config"],
        "properties": {"config": {"type": "string", "minLength": 1, "description":
                                  "A Hugging Face config.json, read as `fleetsim "
                                  "import-model` reads it"}}}]}
    return schema


def profile_schema() -> dict:
    """The JSON Schema of calibrated profiles (what ``fleetsim calibrate`` writes and a
    ``type: calibrated`` cost model reads)."""
    from sim.cost.profile_schema import CalibratedProfile
    return {"$schema": DRAFT, **CalibratedProfile.model_json_schema()}


_TITLES = ("Scenario", "Calibrated step-time profile")     # the schemas fleetsim writes


def _is_schema(path) -> bool:
    try:
        data = json.loads(path.read_bytes()[:2**24])
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("$schema") == DRAFT and \
        data.get("title") in _TITLES


def _cmd_schema(args: argparse.Namespace) -> int:
    schema = profile_schema() if args.profile else scenario_schema()
    text = json.dumps(schema, indent=2) + "\n"
    if args.out is None:
        print(text, end="")
        return 0
    from pathlib import Path

    from sim.output.files.atomic_write import write_file
    from sim.output.files.output_paths import check_file
    out = check_file(Path(args.out), kind="a schema fleetsim wrote",
                     is_kind=_is_schema)
    write_file(out, text)
    print(f"wrote {shown(out)}")
    return 0


def _cmd_lint(args: argparse.Namespace) -> int:
    """Every file checked, each with its errors or ``ok``; exit 2 when any failed."""
    import sys

    import sim
    from sim.api import prepare
    from sim.config.errors import ScenarioError, format_cli_error
    code = 0
    for path in args.scenarios:
        try:
            # everything up to the first simulated event: data files read, arrivals drawn
            prepare(sim.load_scenario(path, allow_paths=allowed_paths(args)))
        except (ScenarioError, OSError, UnicodeError) as exc:
            print(format_cli_error(exc), file=sys.stderr)
            code = max(code, getattr(exc, "exit_code", 2))
            continue
        print(f"{shown(path)}: ok")
    return code


def _cmd_scenarios(args: argparse.Namespace) -> int:
    """The shipped scenarios, each with its description (what `run scenarios/NAME.yaml`
    runs from any folder)."""
    import yaml

    from sim.config.paths import data_dir
    root = data_dir("scenarios")
    for path in sorted(root.rglob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(data, dict) or "pools" not in data:
            continue
        about = " ".join(str(data.get("description") or "").split())
        if not about:       # the file's opening comment, when it has no description
            first = path.read_text(encoding="utf-8").lstrip().splitlines()[0]
            about = first.lstrip("# ").strip() if first.startswith("#") else ""
        print(f"scenarios/{path.relative_to(root).as_posix():40s} {about[:100]}")
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


def _cmd_import_model(args: argparse.Namespace) -> int:
    import yaml

    from pathlib import Path

    from sim.config.errors import ScenarioError
    from sim.config.import_model import import_model, name_problem
    from sim.output.files.atomic_write import write_file
    from sim.output.files.output_paths import check_file

    message = None if args.name is None else name_problem(args.name)
    if message is not None:         # the rules of every name a scenario gives
        raise ScenarioError(message, field="--name")
    out = check_file(Path(args.out), kind="a model profile fleetsim import-model wrote",
                     is_kind=_is_imported_profile) if args.out else None
    profile = import_model(Path(args.config), args.name)
    text = IMPORTED_HEADER + "\n" + yaml.safe_dump(profile, sort_keys=False)
    if out is None:
        print(text, end="")
    else:
        write_file(out, text)
        print(f"wrote {shown(out)} (model '{profile['name']}')")
    return 0


# The first line of every profile import-model writes: the mark of a file it may replace
# (a hand-written or copied profile, even of the same model, is the user's own).
IMPORTED_HEADER = "# model profile written by fleetsim import-model (it replaces only such files)"


def _is_imported_profile(path) -> bool:
    """True if ``path`` is a model profile this command wrote (one it may replace)."""
    from sim.config.errors import ScenarioError
    from sim.config.specs import ModelSpec
    from sim.config.yamlio import load_model
    try:
        with open(path, "rb") as fh:
            if fh.readline(len(IMPORTED_HEADER) + 2).rstrip(b"\r\n") != \
                    IMPORTED_HEADER.encode():
                return False
        load_model(path, ModelSpec, kind="model profile")
    except (OSError, ScenarioError):
        return False
    return True


def add_inspect(sub) -> None:
    schema = sub.add_parser("schema", help="print the scenario JSON Schema (for editors), or "
                                           "with --profile a calibrated profile's")
    schema.add_argument("--profile", action="store_true",
                        help="the calibrated profile's schema (profiles/calibrated/**.yaml) "
                             "instead of the scenario's")
    schema.add_argument("--out", type=path_arg, metavar="FILE",
                        help="write it to FILE (replaces only a schema fleetsim wrote)")
    schema.set_defaults(func=_cmd_schema)

    check = sub.add_parser("lint", help="validate scenario files and the data they read, without running them")
    check.add_argument("scenarios", nargs="+")
    add_allow_path(check)
    check.set_defaults(func=_cmd_lint)

    scen = sub.add_parser("scenarios", help="list the shipped scenarios")
    scen.set_defaults(func=_cmd_scenarios)

    prof = sub.add_parser("profiles", help="list the shipped hardware and model profiles")
    prof.set_defaults(func=_cmd_profiles)

    imp = sub.add_parser("import-model", help="write a model profile from a Hugging Face "
                                              "config.json (Llama, Mistral, Mixtral, Qwen, ...)")
    imp.add_argument("config", type=path_arg, help="the model's config.json")
    imp.add_argument("--name", help="the profile's name (default: the config's model name)")
    imp.add_argument("--out", type=path_arg, help="write the profile here (default: print it); use it in "
                                   "a scenario under models: or as a file in profiles/models/")
    imp.set_defaults(func=_cmd_import_model)
