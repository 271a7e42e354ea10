"""Backends: primitives only (memory, queues, kernels). Policy lives in ``runtime/``."""
