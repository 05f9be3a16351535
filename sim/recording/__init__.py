"""What a run records while it runs, below the simulation that feeds it: the recorder's
per-request and per-sample columns, each pool's GPU usage over time, and the accounts
(GPU-seconds, cost) of each pool and team. The results, tables and files made from them
afterwards are :mod:`sim.output`'s."""
