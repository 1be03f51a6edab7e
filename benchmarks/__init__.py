"""Measured figures (not asserted in tests). `python -m benchmarks` runs every bench_*.py module's main()."""
