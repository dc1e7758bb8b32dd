"""Benchmarks of agentkit against the raw client floor and peer frameworks (see README.md)."""
