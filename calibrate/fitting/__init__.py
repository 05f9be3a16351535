"""What every tool of calibrate/ shares: a model's shapes and its tensor-parallel shard
(``shapes``), the monotone tables of a calibrated profile fitted to timings (``tables``),
and the profile file itself (``profile_file``). No torch here."""
