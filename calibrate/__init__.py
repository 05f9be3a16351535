"""Measuring step times and checking fleetsim against real engines: one subpackage per
tool (``fitting``, ``microbench``, ``kernels``, ``engines``, ``validate``) behind one
command line, ``python -m calibrate COMMAND`` (:mod:`calibrate.cli`).

Imported only by ``fleetsim calibrate`` and ``fleetsim validate``; the simulator
(``import sim``) never imports torch.
"""
