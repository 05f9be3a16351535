"""Real serving engines as references: what an engine is asked and reports (``records``)
and the engine's own step terms fitted on the steps it served (``step_fit``), shared by
Hugging Face transformers (``hf``) and vLLM's CPU build (``vllm_cpu``).
``python -m calibrate validate`` (``fleetsim validate``)."""
