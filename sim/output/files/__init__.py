"""The files a run writes: the result folder and what goes in it (atomically, into a
folder marked as fleetsim's; never over what fleetsim did not write), its names, and the
JUnit record of `check`."""
