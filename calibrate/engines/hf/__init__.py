"""Predictions against a real engine: ``fleetsim validate SCENARIO...``.

Each validation scenario is an ordinary fleetsim scenario with one stream and
one pool of ``tiny-llama`` on the ``cpu`` hardware: the stream is the
workload (arrival process, prompt and output lengths, seed), the pool the
engine's limits (``continuous``: token budget, sequence cap, block size and
KV blocks; ``single``: one request at a time).

For each scenario:

1. the scenario's requests are drawn exactly as ``fleetsim run`` draws them;
2. the real engine serves them on this machine at their arrival times
   (transformers' continuous batching for ``continuous``, plain
   ``model.generate`` one at a time for ``single``), recording each
   request's arrival, first token and finish;
3. fleetsim simulates the same requests (the arrival times the engine saw,
   replayed as a trace) with the pool's own limits and the calibrated
   profile, extended by the engine's per-step terms
   (``calibrate.engines.step_fit``, fitted once per engine and limits on a fixed
   grid of synthetic batches, never on the workloads);
4. the measured and predicted figures are compared.

Everything the engine measured for a workload is kept in its
``engine_log.json.gz`` (``calibrate.engines.hf.engine_log``): ``validate_logs`` (``fleetsim
validate --from-logs``) redoes steps 3 and 4 and the fit on a recorded run,
without the engine, and gets the same figures whatever the machine's speed.

The profile must describe this machine: when the scenario's profile was made
on another CPU (or ``recalibrate`` is asked), this machine is calibrated
first, into the output folder.
"""
from __future__ import annotations

from calibrate.engines.hf.comparison import (compare_workload, figures, pooled_figures,
                                           simulate)
from calibrate.engines.hf.profiles import base_profile, engine_profile, host_profile
from calibrate.engines.hf.report import (ValidationReport, format_table, plot_ttft_cdfs,
                                       write_report)
from calibrate.engines.hf.serving import serve, validate, validate_logs
from calibrate.engines.hf.workload import (METRICS, ValidationError, Workload, WorkloadResult,
                                         draw_requests, load_workload)

__all__ = ["METRICS", "ValidationError", "ValidationReport", "Workload", "WorkloadResult", "base_profile", "compare_workload", "draw_requests", "engine_profile", "figures", "format_table", "host_profile", "load_workload", "plot_ttft_cdfs", "pooled_figures", "serve", "simulate", "validate", "validate_logs", "write_report"]
