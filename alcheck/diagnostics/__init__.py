"""Diagnostics beyond AL: the KV-lookahead ablation and the engine sampler lossless check."""
