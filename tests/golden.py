"""Golden outputs: a fingerprint of every shipped scenario's seeded results.

Each scenario of ``scenarios/`` is run shortened (20 s of arrivals; 2 s for the
benchmarks) and its request table, time series and summary are reduced to SHA-256
digests of their values, floats written with 12 significant digits: any change of
behaviour shows, while the last bits a machine's maths library or SIMD width leaves in a
float (numpy picks its float64 kernels by the CPU's SIMD features) do not.
``tests/test_golden.py`` compares them with
``tests/data/golden/digests.json``: a refactoring must leave every digest as it was; a
change meant to alter results rewrites the file with

    .venv/bin/python tests/golden.py --update

and says in its commit which scenarios moved and why.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
DIGESTS = ROOT / "tests" / "data" / "golden" / "digests.json"


def shortened(path: Path):
    import sim
    from sim.config.scenario import Scenario
    scenario = sim.load_scenario(path)
    data = scenario.model_dump()
    data["duration"] = min(data["duration"], 2.0 if "bench" in path.stem else 20.0)
    data["warmup"] = min(data["warmup"], data["duration"] / 2)
    data["sample_interval"] = min(data["sample_interval"], data["duration"])
    out = Scenario.model_validate(data)
    out._source = scenario._source
    return out


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


SIGNIFICANT = "%.12g"


def _rounded(value):
    """``value`` with every float written to :data:`SIGNIFICANT` digits."""
    if isinstance(value, dict):
        return {str(k): _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    if isinstance(value, float):
        return SIGNIFICANT % value
    return value


def _table(df) -> str:
    return _digest(df.to_csv(index=False, float_format=SIGNIFICANT, lineterminator="\n"))


def digests(path: Path) -> dict[str, str]:
    """The scenario's shortened run, reduced to one digest per output."""
    import sim
    res = sim.run(shortened(path))
    return {"requests": _table(res.requests), "timeseries": _table(res.timeseries),
            "summary": _digest(json.dumps(_rounded(res.summary), sort_keys=True, default=repr)),
            "rows": len(res.requests)}


def main(argv: list[str]) -> int:
    if argv != ["--update"]:
        print(__doc__, file=sys.stderr)
        return 2
    out = {p.stem: digests(p) for p in SCENARIOS}
    DIGESTS.parent.mkdir(parents=True, exist_ok=True)
    DIGESTS.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(out)} scenarios -> {DIGESTS}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
