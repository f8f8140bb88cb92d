"""Benchmarks, each run as a module from the checkout: `python -m benchmarks.NAME` (`--quick`: that it runs)."""
