"""fleetsim's version: one source, read by the package, its outputs and the wheel."""
__version__ = "0.1.0"
