"""A ``fleetsim sweep`` table: its columns (what it varied, what it measured), the check
that a file given as one is one, and the x axis its curves are drawn against. No plotting
here: the command line reads these without drawing."""
from __future__ import annotations

SWEEP_X = "output_tokens_per_s"
SWEEP_Y = ("ttft_p99_s", "tpot_p99_s")


def sweep_varied(table) -> list[str]:
    """The columns a sweep varied: those before its first figure."""
    cols = list(table.columns)
    return cols[:cols.index("arrived")] if "arrived" in cols else []


def check_sweep_table(table, where: str) -> None:
    import numpy as np
    import pandas as pd

    from sim.config.errors import ScenarioError
    for column in map(str, table.columns):    # pandas renames a second 'x' to 'x.1'
        stem, dot, number = column.rpartition(".")
        if dot and number.isdigit() and stem in table.columns:
            raise ScenarioError(f"{where} names column {stem!r} twice", file=where, line=1)
    missing = [c for c in (SWEEP_X, *SWEEP_Y) if c not in table.columns]
    if missing or not sweep_varied(table):
        raise ScenarioError(f"{where} is not a `fleetsim sweep` table (missing "
                            f"{', '.join(missing) or 'the varied columns'})", file=where)
    for column in (SWEEP_X, *SWEEP_Y):
        given = table[column]
        values = pd.to_numeric(given, errors="coerce").to_numpy(dtype=np.float64)
        # empty is allowed (a point where no request finished); anything else is a
        # finite number of at least 0
        bad = (given.notna().to_numpy() & ~(np.isfinite(values) & (values >= 0)))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ScenarioError("not a figure a sweep writes (a finite number, at least "
                                "0, or empty)", file=where, line=row + 2, field=column)
    if len(table) == 0:
        raise ScenarioError(f"{where} is a sweep table of no points (a header only)",
                            file=where)


MAX_SWEEP_LINES = 12     # more values of the first varied field: points coloured by it

# a varied field that sets the offered load (arrival rates, their scale, closed-loop
# clients): its sweep is drawn against the throughput achieved
LOAD_WORDS = ("rate", "rate_scale", "arrival", "clients")


def is_load_field(field: str) -> bool:
    return any(part in LOAD_WORDS for part in str(field).split("."))


def sweep_x(table) -> str:
    """The x axis of a sweep's curves: the throughput achieved when the sweep varied the
    load (or nothing else), else the last field it varied (replicas, TP, a price ...)."""
    varied = sweep_varied(table)
    if not varied or any(is_load_field(v) for v in varied):
        return SWEEP_X
    return varied[-1]
