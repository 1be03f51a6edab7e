"""Shared by tests and benchmarks (never shipped with the product)."""
