"""What the simulation is made of, below every component that handles it: a request and
its terminal statuses, the paged KV cache and the names of its blocks, and the wake-up
timers. Entities import nothing of fleetsim above the configuration schema."""
