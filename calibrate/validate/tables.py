"""The GPU validation's headline and its markdown tables (calibrate/validate/published.py runs
the rows). Self-contained, with no fleetsim import: ``--before-checkout`` runs under an
older fleetsim."""
from __future__ import annotations

import math
import statistics

TARGETS = {"throughput": 0.10, "ttft": 0.20, "tpot": 0.20}
# a saturated row's capacity ratio (largest simulated rate within its bounds / published
# rate) a good model gives: the published rate is a lower bound on the engine's capacity
# under the bounds, and close to it (calibrate/validate/capacity.py)
RANGE = (1.0, 1.15)


def _classes(rows: list[tuple[str, str, dict]]) -> dict[str, list[tuple[str, float]]]:
    """Each (name, load, errors)'s errors by class: throughput; TTFT and TPOT at p50 on a
    low-load row and at p99 on a high-load one."""
    classes: dict[str, list[tuple[str, float]]] = {"throughput": [], "ttft": [], "tpot": []}
    for name, load, errors in rows:
        for key, err in errors.items():
            if key == "output_tokens_per_s":
                classes["throughput"].append((name, err))
                continue
            metric, q = key.split("_")[0], key.split("_")[1]
            if (q == "p50") == (load == "low"):
                classes[metric].append((f"{name} {q}", err))
    return classes


def _spread(errs: list[tuple[str, float]]) -> dict:
    """The count, median |error| (n/a if any is not finite) and worst of ``errs``."""
    mags = [abs(e) for _, e in errs if math.isfinite(e)]
    worst = max(errs, key=lambda x: abs(x[1]) if math.isfinite(x[1]) else math.inf,
                default=None)
    median = statistics.median(mags) if len(mags) == len(errs) and mags else math.nan
    return {"n": len(errs), "median_abs": median,
            "worst": None if worst is None else {"row": worst[0], "error": worst[1]}}


def headline(rows: list[dict]) -> dict[str, dict]:
    """The two kinds of row, counted apart.

    ``below_saturation``: median and worst |error| per class over the rows not marked
    saturated: throughput (every row that publishes it); TTFT and TPOT at p50 on low-load
    rows and at p99 on high-load rows; each against its target.

    ``saturated``: how many rows meet their bounds at the published rate, each row's
    capacity ratio and how many lie in RANGE (the target: all of them), and the TTFT and
    TPOT errors at the simulated capacity (classed as above) of the rows where the search
    found it; the others' latencies are named in ``reported_only`` and counted nowhere."""
    below = _classes([(r["name"], r["load"], r["error"]) for r in rows
                      if not r.get("saturated")])
    out = {"below_saturation": {}}
    for cls, errs in below.items():
        spread = _spread(errs)
        out["below_saturation"][cls] = {
            **spread, "target": TARGETS[cls],
            "met": bool(math.isfinite(spread["median_abs"])
                        and spread["median_abs"] <= TARGETS[cls])}
    sat = [r for r in rows if r.get("saturated")]
    ratios = {r["name"]: r["saturated"]["capacity_ratio"] for r in sat
              if "capacity_ratio" in r["saturated"]}
    inside = [n for n, x in ratios.items() if RANGE[0] <= x <= RANGE[1]]
    counted = [r for r in sat if r["saturated"].get("at_capacity")]
    at_capacity = _classes([(r["name"], r["load"], {
        k: e for k, e in r["saturated"]["at_capacity"]["error"].items()
        if k != "output_tokens_per_s"}) for r in counted])
    out["saturated"] = {
        "n": len(sat), "searched": len(ratios),
        "meet_bounds": sum(bool(r["saturated"].get("at_published", {}).get("meets"))
                           for r in sat),
        "capacity_ratios": ratios, "range": list(RANGE), "in_range": len(inside),
        "at_capacity": {cls: _spread(at_capacity[cls]) for cls in ("ttft", "tpot")},
        "reported_only": [r["name"] for r in sat if not r["saturated"].get("at_capacity")],
        "met": len(ratios) == len(sat) and len(inside) == len(sat)}
    return out


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x * 100:+.0f}%"


def _fmt(key: str, v: float) -> str:
    if not math.isfinite(v):
        return "n/a"
    return f"{v:,.0f}" if key == "output_tokens_per_s" else f"{v:,.1f}"


UNITS = {"output_tokens_per_s": "output tok/s", "ttft_p50_ms": "TTFT p50 ms",
         "ttft_p99_ms": "TTFT p99 ms", "tpot_p50_ms": "TPOT p50 ms", "tpot_p99_ms": "TPOT p99 ms"}


def markdown(reports: dict[str, dict]) -> str:
    """One table for the published figures with a column per cost model run (a saturated
    row's marked: at the published rate, counted in no median), one for the saturated
    rows' capacity check and one for their figures at the simulated capacity, then the
    headline of each kind of row."""
    names = list(reports)
    first = reports[names[0]]["rows"]
    cols = " | ".join(f"{n}: fleetsim | error" for n in names)
    lines = [f"| setting | figure | published | {cols} | source |",
             "|---|---|---:|" + "---:|---:|" * len(names) + "---|"]
    for i, r in enumerate(first):
        mark = " (saturated)" if r.get("saturated") else ""
        for key, pub in r["published"].items():
            cells = " | ".join(f"{_fmt(key, reports[n]['rows'][i]['predicted'][key])} | "
                               f"{_pct(reports[n]['rows'][i]['error'][key])}" for n in names)
            lines.append(f"| {r['setting']} | {UNITS[key]}{mark} | {_fmt(key, pub)} | "
                         f"{cells} | {r['source']} |")
    saturated = [i for i, r in enumerate(first) if r.get("saturated")]
    if saturated:
        lines += _saturated_tables(reports, saturated)
    lines += ["", "| class (rows below saturation) | rows | target | "
              + " | ".join(f"{n}: median abs error | {n}: worst" for n in names) + " |",
              "|---|---:|---:|" + "---:|---|" * len(names)]
    below = {n: reports[n]["headline"]["below_saturation"] for n in names}
    for cls, h0 in below[names[0]].items():
        cells = []
        for n in names:
            h = below[n][cls]
            median = ("n/a" if not math.isfinite(h["median_abs"])
                      else f"{h['median_abs'] * 100:.0f}% ({'met' if h['met'] else 'missed'})")
            cells.append(f"{median} | {_worst(h)}")
        lines.append(f"| {cls} | {h0['n']} | {h0['target'] * 100:.0f}% | "
                     + " | ".join(cells) + " |")
    if saturated:
        lines += ["", "| saturated rows | rows | meet their bounds at the published rate | "
                  f"capacity ratio in [{RANGE[0]:.2f}, {RANGE[1]:.2f}] | capacity ratios | "
                  "TTFT at capacity: median abs error | TPOT at capacity: median abs error | "
                  "latencies reported only |", "|---|---:|---:|---:|---|---:|---:|---|"]
        for n in names:
            h = reports[n]["headline"]["saturated"]
            ratios = ", ".join(f"{k} {_ratio(v)}" for k, v in h["capacity_ratios"].items())
            spread = [("n/a" if not math.isfinite(a["median_abs"]) else
                       f"{a['median_abs'] * 100:.0f}% of {a['n']}")
                      for a in (h["at_capacity"]["ttft"], h["at_capacity"]["tpot"])]
            counts = (f"{h['meet_bounds']} | {h['in_range']} "
                      f"({'met' if h['met'] else 'missed'})" if h["searched"] else "n/a | n/a")
            lines.append(f"| {n} | {h['n']} | {counts} | {ratios or 'not searched'} | "
                         f"{spread[0]} | {spread[1]} | "
                         f"{', '.join(h['reported_only']) or 'none'} |")
    return "\n".join(lines) + "\n"


def _worst(h: dict) -> str:
    return "" if h["worst"] is None else f"{_pct(h['worst']['error'])} ({h['worst']['row']})"


def _ratio(x: float) -> str:
    return f"{x:.2f}"


def _saturated_tables(reports: dict[str, dict], saturated: list[int]) -> list[str]:
    """The saturated rows' capacity check, then their figures at the simulated capacity."""
    names = list(reports)
    first = reports[names[0]]["rows"]
    lines = ["", "| saturated row | bounds | "
             + " | ".join(f"{n}: at the published rate | {n}: capacity ratio | "
                          f"{n}: binds (fleetsim / published)" for n in names)
             + " | bounds from |", "|---|---|" + "---|---:|---|" * len(names) + "---|"]
    for i in saturated:
        r0 = first[i]["saturated"]
        bounds = ", ".join(f"{k} {v:,.0f} ms" for k, v in r0["bounds_ms"].items())
        cells = []
        for n in names:
            sat = reports[n]["rows"][i]["saturated"]
            if "capacity_ratio" not in sat:
                cells.append("not searched | | ")
                continue
            seen = ", ".join(f"{k} {_fmt(k, v)} ms"
                             for k, v in sat["at_published"]["measured_ms"].items())
            ratio = {"found": _ratio(sat["capacity_ratio"]),
                     "above": f">= {_ratio(sat['capacity_ratio'])} (none missed)",
                     "below": "< 1/2 (none met)"}[sat["capacity"]]
            cells.append(f"{'meets' if sat['at_published']['meets'] else 'misses'} ({seen}) "
                         f"| {ratio} | {sat['binding'] or 'n/a'} / "
                         f"{sat['published_binding'] or 'n/a'}")
        lines.append(f"| {first[i]['setting']} | {bounds} | " + " | ".join(cells)
                     + f" | {r0['bounds_source']} |")
    lines += ["", "| saturated row at its simulated capacity | figure | published | "
              + " | ".join(f"{n}: rate x | {n}: fleetsim | {n}: error" for n in names) + " |",
              "|---|---|---:|" + "---:|---:|---:|" * len(names)]
    for i in saturated:
        for key, pub in first[i]["published"].items():
            cells = []
            for n in names:
                at = reports[n]["rows"][i]["saturated"].get("at_capacity")
                cells.append("n/a | not counted | " if at is None else
                             f"{_ratio(at['rate_scale'])} | {_fmt(key, at['predicted'][key])} | "
                             f"{_pct(at['error'][key])}")
            lines.append(f"| {first[i]['setting']} | {UNITS[key]} | {_fmt(key, pub)} | "
                         + " | ".join(cells) + " |")
    return lines
