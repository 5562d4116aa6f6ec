"""`alcheck serve`: the built-in PagedRunner behind HTTP, speaking vLLM's or SGLang's dialect.

| module | job |
|---|---|
| `config.py` | `ServeConfig`: the server's settings, checked before anything loads |
| `pair.py` | `ServedPair`: the pair loaded once (`alcheck run`'s planner and loader), the runner it serves |
| `jobs.py` | `JobQueue`: one worker thread owns the runner; HTTP requests queue up and never race |
| `params.py` | request-body parsing shared by both dialects; `BadRequest` for HTTP 400 |
| `metrics.py` | Prometheus counters under vLLM's and SGLang's names, one registry per app |
| `common.py` | what both dialects share: `ServeContext`, `VERSION`, `read_body` |
| `dialect_vllm.py`, `dialect_sglang.py` | each engine's routes and answers (they import `common.py` only) |
| `app.py` | the FastAPI app: imports the dialects and wires them together |
| `listen.py` | bind, serve with uvicorn, print the listening line, stop on SIGINT/SIGTERM |
"""
