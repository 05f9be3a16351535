"""Intra-pool routers: pick the replica a request goes to."""
