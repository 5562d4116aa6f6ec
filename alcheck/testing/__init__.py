"""Tiny checkpoints in the exact on-disk format of real ones: for tests, benchmarks and the demo trainer."""
