"""Capacity-planning workflows on top of single runs: overrides, replications
with confidence intervals, sweeps (local processes or Dask), sizing against
SLOs, comparison and the CI check."""
