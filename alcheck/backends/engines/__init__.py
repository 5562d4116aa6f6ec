"""Clients of running inference engines (vLLM, SGLang): their request and response formats, the
server-wide counter fallback and starting a server per K; table.py names them and holds what
differs between them. backends/engine_client.py ties them together.
Field names and formulas: shared/ENGINES.md (sections 1.5, 2.1, 1.1, 4)."""
