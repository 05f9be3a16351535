"""vLLM's CPU build as the reference engine: a plan served in vLLM's own environment
(``serve``, run there as a script), fleetsim's scheduler replayed on its log
(``schedule``), its step terms timed (``timing``, ``sentinel``) and reported against
targets (``targets``); vLLM V1's host time per step (``host``, ``host_serve``)."""
