"""The run: the simulation's event loop, the fleet's composition root, pools, replicas,
requests, the paged KV cache and the wake-up timers they share."""
