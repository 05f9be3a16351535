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
