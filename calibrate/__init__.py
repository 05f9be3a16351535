"""Calibration of step-time cost models from torch microbenchmarks.

Imported only by ``fleetsim calibrate``; the simulator (``import sim``)
never imports torch.
"""
