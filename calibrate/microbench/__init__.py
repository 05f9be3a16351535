"""Torch microbenchmarks on this machine's device: each term of the step-time model timed
on the model's own layer shapes (``bench``), whole forwards (``forwards``), fitted into a
calibrated profile (``run``) and plotted (``plot``); ``check`` re-times a profile's points,
``tokenise_time`` the front end's tokeniser. ``python -m calibrate profile``."""
