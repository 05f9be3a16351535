"""The numbered notebooks run top to bottom without error."""
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path: Path) -> None:
    """Every cell runs (assertions inside the notebook included)."""
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_with_its_outputs_and_inline_charts(path: Path) -> None:
    """An analyst opening a notebook sees what a run gives, charts included: every code
    cell ran, no error is stored, and no cell forces a backend that draws nothing."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code)
    outputs = [o for c in code for o in c.outputs]
    assert not any(o.output_type == "error" for o in outputs)
    assert not any("matplotlib.use(" in c.source for c in code)
    if any("plt.subplots" in c.source for c in code):
        assert any("image/png" in o.get("data", {}) for o in outputs)
