"""Benchmarks: ``pyrofling bench ...``.  Targets live here, not in timed unit tests."""
