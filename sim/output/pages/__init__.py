"""The pages: report.html (its charts drawn in the browser from the run's data,
static/), the sweep and size pages, and the PNGs of `run --png` (matplotlib)."""
