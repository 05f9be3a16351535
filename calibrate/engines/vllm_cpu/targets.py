"""The vLLM comparison's targets and its report: what misses a target, and the tables
(``equivalence.txt``, ``equivalence.json``) that ``fleetsim validate --engine vllm``
prints and the README publishes."""
from __future__ import annotations

import json
from pathlib import Path

from calibrate.engines.vllm_cpu import schedule as vllm_schedule

TARGET_SHARE = 0.99        # share of steps identical to vLLM's, per workload
# metric -> target relative error (None: reported only); totals within TOTALS_TARGET
TIMING_TARGETS = {"ttft_p50_s": 0.10, "ttft_p90_s": 0.20, "tpot_p50_s": 0.10,
                  "output_tokens_per_s": 0.10, "ttft_p99_s": None, "tpot_p90_s": None,
                  "e2e_p50_s": None}
TOTALS_TARGET = 0.05



KIND_ORDER = vllm_schedule.KINDS


def missed_targets(row: dict) -> list[str]:
    """What in one workload's comparison misses its target: the share of identical steps,
    then (when the run was timed) each targeted figure and each total."""
    missed = []
    if row["share_identical"] < TARGET_SHARE:
        missed.append(f"identical steps {100 * row['share_identical']:.2f}% < "
                      f"{100 * TARGET_SHARE:.0f}%")
    t = row.get("timing")
    if t is None:
        return missed
    why = unsteady(row)
    if why:
        missed.append(f"machine unsteady ({why}): not fit to publish")
    for key, target in TIMING_TARGETS.items():
        err = t["errors"][key]
        if target is not None and not abs(err) <= target:       # NaN misses too
            missed.append(f"{key} {100 * err:+.0f}% (target {100 * target:.0f}%)")
    for key, (theirs, ours) in t["totals"].items():
        if abs(ours - theirs) > TOTALS_TARGET * max(theirs, 0):
            missed.append(f"{key} {ours} against vLLM's {theirs}")
    return missed


# how far vLLM's workload steps may run from the grid's fit (median of measured / fitted,
# the fit at the machine's speed the sentinels measured at each step), and how far the
# machine's speed may range within the workload, before the run's timing is said to
# measure the machine rather than fleetsim
STEADY_MACHINE = 0.10


def unsteady(row: dict) -> str | None:
    """Why a timed workload's row measures the machine rather than fleetsim, or None."""
    t = row.get("timing")
    if t is None:
        return None
    ratio = t["fit"].get("workload_step_ratio")
    machine = t["fit"].get("machine") or {}
    why = []
    if ratio is not None and abs(ratio - 1.0) > STEADY_MACHINE:
        why.append(f"workload steps x{ratio:.2f} the fit")
    spread = machine.get("workload_spread")
    if spread is not None and spread > STEADY_MACHINE:
        why.append(f"machine speed ranged {100 * spread:.0f}% within the workload")
    return "; ".join(why) or None


def write_report(rows: list[dict], out: Path) -> str:
    """The table (returned, and written to ``out/equivalence.txt``) and
    ``out/equivalence.json``."""
    lines = ["| workload | requests | steps | identical | preemptions (vLLM / fleetsim) | "
             "prefix-cache tokens (vLLM / fleetsim) | mismatches |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(
            r["mismatches"].items(), key=lambda kv: KIND_ORDER.index(kv[0]))) or "none"
        lines.append(f"| {r['workload']} | {r['requests']} | {r['steps']} | "
                     f"{100 * r['share_identical']:.2f}% | {r['vllm_preemptions']} / "
                     f"{r['fleetsim_preemptions']} | {r['vllm_cached_tokens']} / "
                     f"{r['fleetsim_cached_tokens']} | {kinds} |")
    timed = [r for r in rows if "timing" in r]
    if timed:
        names = {"ttft_p50_s": "TTFT p50", "ttft_p90_s": "TTFT p90", "tpot_p50_s": "TPOT p50",
                 "output_tokens_per_s": "output tok/s"}
        lines += ["", "| workload | " + " | ".join(
            f"{v} vLLM / fleetsim (err)" for v in names.values())
            + " | preemptions | prefix-cache tokens | held-back step error "
            "| machine speed (sentinels) | workload steps / fit |",
            "|---" * (len(names) + 6) + "|"]
        drifted = []
        for r in timed:
            t = r["timing"]
            cells = []
            for k in names:
                unit = 1.0 if k == "output_tokens_per_s" else 1e3
                fmt = ".0f" if k == "output_tokens_per_s" else ".1f"
                mark = "✓" if abs(t["errors"][k]) <= TIMING_TARGETS[k] else "✗"
                cells.append(f"{unit * t['measured'][k]:{fmt}} / {unit * t['predicted'][k]:{fmt}}"
                             f" ({100 * t['errors'][k]:+.0f}%) {mark}")
            p, c = t["totals"]["preemptions"], t["totals"]["cached_tokens"]
            held = t["fit"]["held_back_step_error"]["median"]
            ratio = t["fit"].get("workload_step_ratio")
            machine = t["fit"].get("machine")
            speed = "n/a" if not machine else \
                f"x{machine['workload_speed']:.2f} (range {100 * machine['workload_spread']:.0f}%" \
                + ("" if machine.get("used", True) else "; not used") + ")"
            why = unsteady(r)
            if why:
                drifted.append(f"{r['workload']} ({why})")
            lines.append(f"| {r['workload']} | " + " | ".join(cells) + f" | {p[0]} / {p[1]} | "
                         f"{c[0]} / {c[1]} | {'n/a' if held is None else f'{100 * held:.1f}%'} "
                         f"| {speed} | {'n/a' if ratio is None else f'x{ratio:.2f}'} |")
        lines.append("")
        if drifted:
            lines.append(
                f"not fit to publish: the machine's speed changed in a way the sentinels do "
                f"not account for (vLLM's workload steps more than {100 * STEADY_MACHINE:.0f}% "
                f"from the grid's fit at the speed the sentinels measured, or the machine's "
                f"speed ranging more than {100 * STEADY_MACHINE:.0f}% within the workload): "
                f"{', '.join(drifted)}. Those rows' timing measures the machine, not "
                f"fleetsim: serve them again on a quieter machine")
        else:
            lines.append(
                f"every timed workload steady within {100 * STEADY_MACHINE:.0f}% (its steps "
                f"against the grid's fit at the machine's measured speed, and the machine's "
                f"speed within it): fit to publish")
        lines.append("latencies in ms; vLLM / fleetsim; targets: TTFT p50, TPOT p50 and "
                     "throughput within 10%, TTFT p90 within 20%, totals within 5%")
    text = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "equivalence.txt").write_text(text, encoding="utf-8")
    (out / "equivalence.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return text
