"""What a validation writes and prints: the table, report.md and the TTFT distributions."""
from __future__ import annotations

import csv
import json
import platform
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from calibrate.engines.step_fit import EngineFit
from calibrate.engines.hf.workload import METRICS, WorkloadResult
from sim.config.paths import data_dir


@dataclass
class ValidationReport:
    results: list[WorkloadResult]
    profile_path: Path
    engine_profiles: dict[str, Path]
    fits: dict[str, EngineFit]
    out_dir: Path
    host: str | None = None               # the machine the engine ran on
    engine_version: str | None = None     # transformers' version there
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[dict]:
        out = []
        for r in self.results:
            for key, (what, target) in METRICS.items():
                out.append({"workload": r.name, "engine": r.kind, "metric": key,
                            "measured": r.measured[key], "predicted": r.predicted[key],
                            "rel_error": r.errors[key], "target": target,
                            "within_target": (None if target is None
                                              else bool(abs(r.errors[key]) <= target))})
        return out


def format_table(report: ValidationReport) -> str:
    lines = []
    head = f"{'workload':<22} {'metric':<13} {'measured':>10} {'predicted':>10} {'error':>8}  target"
    lines.append(head)
    lines.append("-" * len(head))
    for r in report.results:
        for key, (what, target) in METRICS.items():
            m, p, e = r.measured[key], r.predicted[key], r.errors[key]
            unit = "" if key.endswith("per_s") else " s"
            fmt = (lambda v: f"{v:10.1f}") if key.endswith("per_s") else (lambda v: f"{v:10.4f}")
            mark = "" if target is None else (
                f"±{100 * target:.0f}% " + ("ok" if abs(e) <= target else "MISSED"))
            lines.append(f"{r.name:<22} {what + unit:<13} {fmt(m)} {fmt(p)} "
                         f"{100 * e:+7.1f}%  {mark}")
        lines.append(f"{r.name:<22} {'served':<13} {r.num_requests:>10} requests, "
                     f"{r.replays} replay{'s' if r.replays != 1 else ''}")
        se = r.step_error
        if se["points"]:
            lines.append(f"{r.name:<22} {'step time':<13} {se['points']:>10} steps, median "
                         f"|error| {100 * se['median']:.1f}%, max {100 * se['max']:.1f}%")
    return "\n".join(lines)


def _shown(path: Path, out_dir: Path) -> str:
    """A path inside the output folder relative to it (the folder is renamed into place);
    a shipped profile relative to the profiles folder."""
    path = Path(path).resolve()
    for base, prefix in ((out_dir.resolve(), ""), (data_dir("profiles").resolve(), "profiles/")):
        try:
            return prefix + str(path.relative_to(base))
        except ValueError:
            continue
    return str(path)


def write_report(report: ValidationReport) -> None:
    out = report.out_dir
    rows = report.rows()
    with open(out / "validation.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    meta = {
        "host": report.host, "python": platform.python_version(),
        "transformers_version": report.engine_version,
        "profile": _shown(report.profile_path, out),
        "engine_profiles": {k: _shown(v, out) for k, v in report.engine_profiles.items()},
        "engine_fits": {k: {"terms": f.engine, "steps": len(f.rows),
                            "held_back_step_error": f.held_back,
                            "step_error": f.all_steps,
                            "step_error_without_engine_terms": f.without_engine}
                        for k, f in report.fits.items()},
        "workloads": [{"name": r.name, "engine": r.kind, "requests": r.num_requests,
                       "replays": r.replays, "engine_wall_s": round(r.wall_s, 2),
                       "measured": r.measured,
                       "predicted": r.predicted, "rel_error": r.errors,
                       "step_error": r.step_error} for r in report.results],
    }
    (out / "validation.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    (out / "validation.txt").write_text(format_table(report) + "\n", encoding="utf-8")
    plot_ttft_cdfs(report, out / "ttft_cdf.png")


def plot_ttft_cdfs(report: ValidationReport, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = len(report.results)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    for ax, r in zip(axes[0], report.results):
        meas = np.sort([x.first_token_s - x.arrival_s for x in r.engine_requests])
        pred = np.sort(r.sim_requests["ttft_s"].to_numpy(dtype=np.float64))
        for data, label, style in ((meas, "engine (measured)", "-"),
                                   (pred, "fleetsim (predicted)", "--")):
            ax.step(data, np.arange(1, len(data) + 1) / len(data), style, where="post",
                    label=label)
        ax.set_xscale("log")
        ax.set_title(f"{r.name} ({r.kind})", fontsize=9)
        ax.set_xlabel("TTFT (s)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("fraction of requests")
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
