"""A non-editable install carries its profiles and scenarios."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_runs_shipped_scenario_from_another_directory(tmp_path):
    """`pip install .` (no source tree on the path) still finds profiles and
    `scenarios/...` when run from an unrelated working directory."""
    wheel_dir, site = tmp_path / "wheel", tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheel_dir),
                    str(ROOT)], check=True, capture_output=True, timeout=300)
    wheel = next(wheel_dir.glob("fleetsim-*.whl"))
    _check_metadata(wheel)
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(site), str(wheel)], check=True, capture_output=True, timeout=300)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = ("import sim, sys; assert sim.__file__.startswith(sys.argv[1]), sim.__file__; "
            "from sim.cli import main; "
            "sys.exit(main(['run', 'scenarios/v1-single.yaml', '--duration', '5s', "
            "'--out', 'out', '--quiet']))")
    proc = subprocess.run([sys.executable, "-c", code, str(site)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (work / "out" / "summary.json").is_file()
    page = (work / "out" / "report.html").read_text(encoding="utf-8")
    assert "uPlot" in page and "fleetsimCharts" in page      # the chart library shipped


def _check_metadata(wheel: Path) -> None:
    """One version (sim/__init__.py's), the licence as an SPDX expression with its file,
    and Dask only for those who ask for cluster sweeps."""
    import email
    import zipfile

    import sim
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = email.message_from_bytes(zf.read(next(n for n in names
                                                     if n.endswith(".dist-info/METADATA"))))
    assert meta["Version"] == sim.__version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    # the report's chart library, inlined into each report.html, with its own licence
    for name in ("uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE", "report_charts.js"):
        assert f"sim/output/pages/static/{name}" in names, name
    requires = meta.get_all("Requires-Dist")
    dask = [r for r in requires if r.startswith("dask")]
    assert dask and all("extra ==" in r for r in dask), dask
    assert any(r.startswith("scipy") and "extra" not in r for r in requires)


def test_version_flag_prints_the_package_version(capsys):
    import importlib.metadata

    import pytest

    from sim.cli import main
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"fleetsim {importlib.metadata.version('fleetsim')}"


def test_a_dask_sweep_without_dask_says_what_to_install(tmp_path, capsys, monkeypatch):
    import importlib.util

    from sim.cli import main
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "distributed" else real(name, *a))
    code = main(["sweep", str(ROOT / "scenarios" / "quickstart.yaml"), "--vary", "seed=1,2",
                 "--executor", "dask", "--out", str(tmp_path / "t.csv")])
    assert code == 2
    err = capsys.readouterr().err
    assert "--executor" in err and "fleetsim[cluster]" in err
    assert not (tmp_path / "t.csv").exists()


def test_the_readmes_ci_example_installs_no_torch_and_fleetsim_check_needs_none(tmp_path):
    """The CI job the docs suggest (docs/planning.md) installs fleetsim alone (torch is
    only for calibration), and the command it runs starts without importing torch."""
    import yaml
    text = (ROOT / "docs" / "planning.md").read_text(encoding="utf-8")
    block = text.split("# .github/workflows/capacity.yml\n", 1)[1].split("```", 1)[0]
    steps = yaml.safe_load(block)["jobs"]["check"]["steps"]
    runs = [step["run"] for step in steps if "run" in step]
    assert any("pip install fleetsim" in run for run in runs)
    assert not any("torch" in run.split("#")[0] for run in runs)
    code = ("import sys, sim.cli\n"
            "try:\n    sim.cli.main(['check', '--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'check imported torch'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
