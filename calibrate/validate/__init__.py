"""fleetsim against published results of real engines on real GPUs: the table's rows run
(``published``), saturated rows checked by capacity (``capacity``), the headline and
markdown tables (``tables``) and the measured step at each row's operating point
(``operating_point``). ``python -m calibrate validate-gpu``."""
