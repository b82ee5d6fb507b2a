"""Serving: request latency percentiles under load, prefill/decode continuous batching for LLMs."""
