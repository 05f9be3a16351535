"""GPU kernels measured on real GPUs (NVIDIA AIConfigurator's database, ``kernel_db``, its tables
read as curves, ``curves``):
a calibrated profile built from them (``from_kernels``), the shipped GPU profiles
(``gpu_profiles``) and the roofline's constants fitted to them (``roofline_fit``,
``roofline_report``). ``python -m calibrate profile --from aiconfigurator``,
``python -m calibrate gpu-profiles`` and ``python -m calibrate roofline-fit``."""
